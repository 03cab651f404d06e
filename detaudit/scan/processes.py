"""Processes: the entry points of the scanned tree, what each runs, and which RNG families it seeds.

The seeding rule is in docs/scan-rng.md. In short: a Ray actor is seeded by its ``__init__`` or any
method a driver can call (one the tree names; ``__init__``'s own draws only by ``__init__`` itself
or the Ray setup hook); every other
process by its own code; import-time code only by the setup hook; a pytest test by its own body,
its class's and module's setup, and the fixtures it uses (autouse fixtures of its module and of
every ``conftest.py`` above it, and those its parameters name).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from detaudit.scan import conditions as C
from detaudit.scan.analysis import Program, display_name
from detaudit.scan.entries import CLASS_SETUPS, KIND_LABEL, MODULE_SETUPS
from detaudit.scan.evidence import Naming
from detaudit.scan.schema import NO_FUNCTION, DrawFacts, FixtureFacts


@dataclass
class Process:
    name: str  # what a reader recognises: "RolloutManager (Ray actor)"
    kind: str
    target: str
    seeded: set[str] | None  # RNG families seeded at some point of the process's life (None: never asked)
    roots: list[str]
    reach: set[str] = field(default_factory=set)
    # Code that runs before the later seeding: an actor's __init__ (and what it calls), import-time code.
    early: dict[str, set[str]] = field(default_factory=dict)  # function -> families seeded by then
    via: dict[str, str] = field(default_factory=dict)  # function -> how dynamic dispatch reached it
    callers_in: dict[str, list[str]] | None = None  # function -> its callers within this process (built on demand)
    entry_guards: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # see entry_guards()
    is_test: bool = False  # a pytest test, or a process started from test code (a test script's __main__)
    outside: str = ""  # why an entry outside test code is not the pipeline's (outside.py), judged like a test

    def seeded_at(self, function: str, family: str) -> bool:
        early = self.early.get(function)
        return family in (early if early is not None else self.seeded or ())


class _Fixtures:
    """pytest fixtures by name, as a test in a given module sees them (its module, then each
    ``conftest.py`` from its folder up), and the autouse ones that apply to it."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.conftests: dict[str, str] = {}  # folder -> its conftest module
        for module, path in program.paths.items():
            if os.path.basename(path) == "conftest.py":
                self.conftests[os.path.dirname(path)] = module
        self._visible: dict[str, list[FixtureFacts]] = {}  # module -> the fixtures its tests see
        # (module, class) -> (fixtures by name, the autouse ones) for its tests
        self._by_name: dict[tuple[str, str], tuple[dict[str, FixtureFacts], list[FixtureFacts]]] = {}

    def scopes(self, module: str) -> list[str]:
        """The modules whose fixtures a test of ``module`` sees, nearest first."""
        out = [module]
        folder = os.path.dirname(self.program.paths.get(module, ""))
        while folder:
            conftest = self.conftests.get(folder)
            if conftest is not None and conftest != module:
                out.append(conftest)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        return out

    def roots(self, module: str, cls: str, uses: list[str]) -> list[str]:
        """The fixture functions that run before a test's body: autouse ones, and those it (or
        they, in turn) name as parameters."""
        key = (module, cls)
        known = self._by_name.get(key)
        if known is None:
            visible = self._visible.get(module)
            if visible is None:
                visible = self._visible[module] = [f for scope in self.scopes(module)
                                                   for f in self.program.fixtures.get(scope, ())]
            by_name: dict[str, FixtureFacts] = {}
            for fixture in reversed(visible):  # the nearest definition of a name wins
                if not fixture["cls"] or fixture["cls"] == cls:
                    by_name[fixture["name"]] = fixture
            known = self._by_name[key] = (by_name, [f for f in by_name.values() if f["autouse"]])
        by_name, autouse = known
        if not by_name:
            return []
        out: list[str] = []
        todo = autouse + [by_name[n] for n in uses if n in by_name]
        while todo:
            fixture = todo.pop()
            if fixture["target"] in out or len(out) > 64:
                continue
            out.append(fixture["target"])
            todo += [by_name[n] for n in fixture["uses"] if n in by_name]
        return out


def build_processes(program: Program, scripts: list[str], test_code: Callable[[str], bool] | None = None,
                    rel: Callable[[str], str] | None = None, tests_as_pipeline: bool = False,
                    naming: Naming | None = None) -> list[Process]:
    """Every process of the tree; ``test_code(path)``: the file is test code (its processes are tests);
    ``rel(path)``: a path as shown (names a `__main__` whose module name several files share);
    ``naming``: what the tree's non-test code names (a Ray actor's entry methods are those named;
    None: every method). Which ``__main__`` blocks are self-tests or stand-alone tools is judged
    afterwards, over these processes (outside.Outside.judge).

    Unless ``tests_as_pipeline``, a pytest test is followed through test code only: what it runs
    there is what its findings need (draws in tests); the pipeline code it calls is judged by the
    pipeline's own processes (its seeding is still counted).
    """
    if test_code is not None:
        program.test_modules = {m for m, path in program.paths.items() if test_code(path)}
    hook_families: set[str] = set()
    for facts in list(program.modules.values()):
        for hook in facts["hooks"]:
            target = program.canonical(hook, root=program.root(facts["module"]))
            if target is not None:
                hook_families |= program.seeds_given(target)
    processes: list[Process] = []
    entries = [(e, f["module"]) for f in list(program.modules.values()) for e in f["entries"]]
    entries += [({"kind": "script", "target": s, "line": 0}, "") for s in scripts]
    fixtures = _Fixtures(program)
    seen: set[tuple[str, str]] = set()
    for entry, module in sorted(entries, key=lambda em: (em[0]["target"], em[0]["kind"])):
        target = program.canonical(entry["target"], root=program.root_of.get(module))
        if target is None:
            continue
        kind = entry["kind"]
        short = display_name(target).rsplit(".", 1)[-1]
        start_seeded: set[str] = set()  # seeded before any user code runs
        early_roots: list[str] = []  # code that runs before seeds made later in the process's life
        init_seeded: set[str] = set()
        if kind in ("ray", "ray-actor", "ray-task"):
            start_seeded = set(hook_families)
            if target in program.classes:
                kind = "ray-actor"
                roots = actor_methods(program, target, naming)
                init = program.lookup_attr(target, "__init__")
                seeded = start_seeded | set(program.seeds_given(init) if init else ())
                init_seeded = set(seeded)
                for method in roots:  # e.g. init(self, args) that the driver calls first
                    seeded |= program.seeds_given(method)
                early_roots = [init] if init else []
            else:
                kind = "ray-task"
                roots = [target]
                seeded = start_seeded | set(program.seeds_given(target))
        elif kind == "main":
            module_key = target.rsplit(".", 1)[0]
            shared = display_name(module_key) != module_key
            short = "__main__ of " + (rel(program.paths[module_key]) if shared and rel and module_key in program.paths
                                      else display_name(module_key))
            roots = [target]
            seeded = set(program.seeds_given(target))
        elif kind == "test":
            cls = entry.get("cls", "")
            short = f"{cls.rpartition('.')[2]}.{short}" if cls else short
            setups = [program.lookup_attr(cls, name) for name in CLASS_SETUPS] if cls else []
            setups += [f"{module}.{name}" for name in MODULE_SETUPS if f"{module}.{name}" in program.functions]
            roots = [target] + fixtures.roots(module, cls, entry.get("uses", [])) + [s for s in setups if s]
            seeded = set()
            if tests_as_pipeline or any(program.reaches_draw(root, in_tests=True) for root in roots):
                for root in roots:
                    seeded |= program.seeds_given(root)
            else:
                seeded = None  # reaches no draw in test code: its seeding is never asked
        else:
            if kind == "cli" and target in program.classes:  # fire.Fire(Cls): its methods are the commands
                roots = program.class_methods(target)
            else:
                roots = [program.lookup_attr(target, "__init__") or target] if target in program.classes else [target]
            seeded = set()
            for root in roots:
                seeded |= program.seeds_given(root)
            if kind == "worker-init":
                seeded.add("torch")  # DataLoader seeds each worker's torch RNG from its own base seed
                start_seeded.add("torch")
        if (kind, target) in seen:
            continue
        seen.add((kind, target))
        if kind == "cli" and rel is not None and program.module_of.get(target) in program.paths:
            # three scripts' `main` read the same: the file tells them apart
            short = f"{rel(program.paths[program.module_of[target]])}:{display_name(target).rsplit('.', 1)[-1]}"
        name = short if kind == "main" else f"{short} ({KIND_LABEL[kind]})"
        path = program.paths.get(program.module_of.get(target, ""), "")
        process = Process(name, kind, target, seeded, roots,
                          is_test=kind == "test" or bool(path and test_code is not None and test_code(path)))
        if kind == "test" and not tests_as_pipeline:
            if seeded is not None:
                process.reach, process.via = program.reach(roots, within=program.test_modules)
            else:  # most tests reach no draw in test code: what they run is never asked either
                process.reach = set(roots)
            processes.append(process)
            continue
        process.reach, process.via = program.reach(roots)
        if early_roots:
            early, _ = program.reach(early_roots)
            process.early.update({f: init_seeded for f in early})
        for body in program.import_time(process.reach) - set(roots):
            process.reach.add(body)
            process.early[body] = start_seeded  # import-time code runs before any seed call
        processes.append(process)
    return processes


def actor_methods(program: Program, actor: str, naming: Naming | None) -> list[str]:
    """The methods of a Ray actor class that a driver can call: a driver calls a method by its name
    (``actor.m.remote()``, ``getattr(actor, "m")``, a name passed as a string), so those that the
    tree's non-test code names, or can build at run time, and the dunders. Every method when the
    class inherits from a library class (whose code may call its overrides), for an actor of test
    code (tests are judged as tests), or when ``naming`` is None."""
    methods = program.class_methods(actor)
    if naming is None or program.module_of.get(actor) in program.test_modules or not naming.plain_class(actor):
        return methods
    return [m for m in methods if naming.named(m)]


def _callers_in(program: Program, process: Process) -> dict[str, list[str]]:
    """Function -> its callers within the process (built once per process)."""
    if process.callers_in is None:
        callers: dict[str, list[str]] = {}
        for caller in sorted(process.reach):
            for callee, _ in program.callees(caller):
                if callee in process.reach and callee != caller:
                    callers.setdefault(callee, []).append(caller)
        process.callers_in = callers
    return process.callers_in


def switched_off(program: Program, process: Process, draw: DrawFacts) -> bool:
    """Whether every call by which ``process`` reaches the draw's function passes arguments (or
    leaves defaults) that make the draw's `if` conditions on its parameters false for certain
    (``if init_value_head:`` in a function that this process's callers never ask to init)."""
    switch = draw.get("switch")
    function = draw["function"]
    if switch is None or function in process.roots:
        return False
    info = program.functions.get(function, NO_FUNCTION)
    params, defaults = info.get("params", []), info.get("defaults", {})
    callers = _callers_in(program, process).get(function, [])
    if not callers:
        return False
    for caller in callers:
        caller_info = program.functions.get(caller, NO_FUNCTION)
        for index in range(len(caller_info.get("calls", ()))):
            if function not in program.call_targets(caller, index):
                continue
            _, npos, passed = caller_info["sites"][index]
            given = caller_info.get("call_args", {}).get(index, {})
            keywords = {k.partition("<")[0] for k in passed}
            env: dict[str, Any] = {}
            for name in dict.fromkeys([*params, *defaults]):
                position = params.index(name) if name in params else -1
                if 0 <= position < npos:
                    expr = given.get(position)
                elif name in keywords:
                    expr = given.get(name)
                elif "**" in keywords:
                    expr = None  # **kwargs may give it
                else:
                    expr = defaults.get(name)
                value = C.value(expr, {}) if expr is not None else C.UNKNOWN
                if value is not C.UNKNOWN:
                    env[name] = value
            if not C.false_for(switch, env):
                return False  # this call can run the draw
    return True


def entry_guards(program: Program, process: Process, function: str) -> list[tuple[str, str, int]]:
    """(condition, caller, line of the call) triples that hold on every call path from ``process``'s roots to ``function``.

    E.g. ``[("algorithm == 'nft'", "pkg.actors.train_pairs", 185)]`` for a function that the process
    calls only inside ``if algorithm == 'nft':``. A root, a function reached through a cycle
    still being resolved, or a call made outside any `if` contributes no condition, so the
    answer only ever under-states: a condition listed here is one the code really requires.
    """
    _callers_in(program, process)
    return _entry_guards(program, process, function, set())


def _entry_guards(program: Program, process: Process, function: str, active: set[str]) -> list[tuple[str, str, int]]:
    known = process.entry_guards.get(function)
    if known is not None:
        return known
    callers = (process.callers_in or {}).get(function, [])
    if function in process.roots or not callers or function in active:
        return []
    active.add(function)
    common: list[tuple[str, str, int]] | None = None
    for caller in callers:
        conditions, line = program.edge_guards(caller, function)
        path = [(c, caller, line) for c in conditions]
        path += [g for g in _entry_guards(program, process, caller, active) if g not in path]
        common = path if common is None else [g for g in common if g in path]
        if not common:
            break
    active.discard(function)
    # Kept even when a cycle cut a path short: that only drops conditions, never adds one.
    result = common or []
    process.entry_guards[function] = result
    return result


def process_summary(process: Process) -> dict[str, Any]:
    """``seeded`` is None for a test that runs no draw in test code (its seeding is not worked out)."""
    seeded = None if process.seeded is None else sorted(process.seeded)
    summary: dict[str, Any] = {"entry": process.name, "kind": process.kind, "seeded": seeded}
    if process.outside:
        summary["outside_pipeline"] = process.outside
    return summary
