"""The schema of scan-rng's per-file facts, written once: their shape (``Facts`` and the records
it holds), the markers their keys use, and the version the caches are keyed by (a new field or a
new meaning bumps it). The file walker (facts*.py) builds ``Facts``; Program (program_*.py,
analysis.py) reads them; cache.py checks a cached one against ``FACT_KINDS``.

Facts stay plain dicts and lists (they are pickled between processes and into the cache, and a
large tree holds a hundred thousand of them): the TypedDicts give them names and types only.
"""

from __future__ import annotations

import re
import typing
from typing import Any, NotRequired, TypedDict

FACTS_VERSION = 18
MODULE_BODY = "<module>"  # a module's top-level code, as a function
MAIN_BLOCK = "<main>"  # its `if __name__ == "__main__":` block
LOCAL = ".<local>."  # key part of a function-local name: "mod.f.<local>.fn"

TABLE = ".<table>"  # "mod.LOSSES.<table>": a call of an entry of the dict mod.LOSSES

SUPER = ".<super>."  # "mod.Cls.<super>.m": super().m() inside Cls

# A string literal that names a module attribute by dotted path ("pkg.mod.fn" or "pkg.mod:fn").
DOTTED_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")


Condition = list[Any]  # a condition over a function's parameters (conditions.Expr)
# A call as stored for a generator=None guard: (line, positional count, keywords passed a value
# other than None; "kw<param": forwards the caller's own None-default parameter; "**": any).
CallSiteFacts = tuple[int, int, tuple[str, ...]]


class FunctionFacts(TypedDict):
    """One function (or a class body, ``<module>``, ``<main>``), keyed by its qualified name."""

    line: int
    calls: list[str]  # what it calls, qualified (a LOCAL, TABLE or SUPER marker where so)
    sites: list[CallSiteFacts]  # one per call, in the same order
    seeds: list[str]  # the RNG families it seeds
    cls: str | None  # the class it is a method of (unqualified), or None
    params: NotRequired[list[str]]  # positional parameters (no self/cls), when a condition needs them
    defaults: NotRequired[dict[str, Condition]]  # parameter -> its constant default
    none_params: NotRequired[dict[str, int]]  # parameters defaulting to None -> position
    decorators: NotRequired[list[str]]  # decorators that may register or replace it
    in_main: NotRequired[bool]  # defined inside the `__main__` block
    loader: NotRequired[bool]  # returns a loader's result on its own argument
    makes: NotRequired[list[str]]  # classes it returns instances of (a factory)
    returns: NotRequired[list[str]]  # loaders whose result it returns
    yields: NotRequired[list[str]]  # what a registry entry it returns names
    maybe_seed: NotRequired[list[list[Any]]]  # [written name, index in calls or -1, line]: a seed not followed
    guarded_calls: NotRequired[list[list[Any]]]  # [index in calls, the `if` texts around it, line]
    seed_at: NotRequired[dict[int, list[str]]]  # index in calls -> the families that call seeds
    seed_conds: NotRequired[dict[int, Condition]]  # index in calls -> when that call seeds
    call_args: NotRequired[dict[int, dict[int | str, Condition]]]  # index -> position/keyword -> value passed
    modes: NotRequired[list[list[str]]]  # [bind key, "eval" or "train"]: modules put in a mode


class ClassFacts(TypedDict):
    line: int
    methods: list[str]  # qualified
    bases: list[str]  # resolved where the file can
    opaque_bases: NotRequired[bool]  # a base that is no dotted name (a call's result)
    decorators: NotRequired[list[str]]
    in_main: NotRequired[bool]


class DrawFacts(TypedDict):
    """One call that a rule matched."""

    rule: str
    message: str
    line: int
    end_line: int
    col: int
    function: str  # qualified
    guards: list[str]  # the `if` texts around it
    code: str  # its source line
    param: str  # the enclosing function's generator=None parameter that guards it, or ''
    impact: str  # what the value is shown to reach when inert, or ''
    impact_by_name: NotRequired[str]  # a sink named only (the value flows on): unproven
    before: NotRequired[list[int]]  # indexes of calls that always run before it in its function
    seeded_here: NotRequired[list[str]]  # families those calls seed
    callee: NotRequired[str]  # a library rule's callee (the tree may define it)
    switch: NotRequired[list[str]]  # the parameters whose values switch it off
    mode_class: NotRequired[str]  # the module class whose training mode gates it


class EntryFacts(TypedDict):
    """A process entry point: kind in entries.KIND_LABEL."""

    kind: str
    target: str
    line: int
    uses: NotRequired[list[str]]  # a test's fixtures
    cls: NotRequired[str]  # a test's class


class FixtureFacts(TypedDict):
    name: str
    target: str
    uses: list[str]
    cls: str
    autouse: bool


class Facts(TypedDict):
    """One file's facts."""

    version: int
    module: str
    imports: dict[str, str]  # local name -> what it imports
    functions: dict[str, FunctionFacts]
    classes: dict[str, ClassFacts]
    draws: list[DrawFacts]
    entries: list[EntryFacts]
    fixtures: list[FixtureFacts]
    hooks: list[str]  # Ray worker setup hooks
    suppress: dict[int, list[str]]  # line -> rules a `# detaudit: ignore` there suppresses ("*": all)
    strings: list[list[str]]  # [a dotted-path string, the attribute it is assigned to or '']
    tables: dict[str, list[str]]  # module-level dict of functions or classes -> what its values name
    string_tables: dict[str, list[str]]  # module-level dict of dotted-path strings -> the strings
    binds: list[list[Any]]  # [key, what the call denotes, its code, its argument, line]
    names: list[str]
    imported: list[str]  # modules imported
    dynamic: list[list[str]]  # [owner, regex of attribute names built at run time]
    string_names: list[str]
    local_uses: dict[str, list[str]]
    script_strings: list[str]
    lookups: list[str]
    registrars: dict[str, str]  # function -> the table it registers into


# What a function or class the facts do not hold reads as (never written to).
NO_FUNCTION: FunctionFacts = {"line": 0, "calls": [], "sites": [], "seeds": [], "cls": None}
NO_CLASS: ClassFacts = {"line": 0, "methods": [], "bases": []}


def _kind(hint: Any) -> type:
    return typing.get_origin(hint) or hint


# Each key of Facts -> the type a cached value must have (cache.py).
FACT_KINDS: dict[str, type] = {key: _kind(hint) for key, hint in typing.get_type_hints(Facts).items()}
