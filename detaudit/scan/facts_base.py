"""The state of one file's walk (``facts.FileFacts``) and what every part of it uses: where a name
points (imports, aliases, definitions), the values a name is assigned, the class an annotation
names, and conditions over a function's parameters."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import NamedTuple

from detaudit.scan import conditions as C
from detaudit.scan import entries as E
from detaudit.scan.impact import Scope
from detaudit.scan.schema import (
    DOTTED_STRING,
    LOCAL,
    MAIN_BLOCK,
    MODULE_BODY,
    ClassFacts,
    EntryFacts,
    FixtureFacts,
    FunctionFacts,
)
from detaudit.scan.seeds import GENERATOR_MAKERS, generator_holder

_BUILTINS = frozenset({"id", "hash"})

# Libraries whose classes an annotation often names; none of them is a class of the scanned tree.
LIBRARY_HEADS = frozenset({
    "torch", "numpy", "typing", "typing_extensions", "collections", "pathlib", "datetime", "enum", "logging",
    "argparse", "os", "re", "json", "functools", "itertools", "ray", "transformers", "PIL", "pandas", "abc",
    "dataclasses", "concurrent", "asyncio", "threading", "multiprocessing", "omegaconf", "tensordict", "peft",
    "diffusers", "accelerate", "deepspeed", "megatron", "vllm", "sglang", "safetensors", "datasets", "queue",
})

# Fields that never hold a call, a string or a dict (contexts, operators, identifiers, flags):
# the walks skip them.
_LEAF_FIELDS = frozenset({"ctx", "op", "ops", "id", "arg", "attr", "kind", "conversion", "type_comment", "level",
                          "module", "is_async", "simple", "names", "name", "asname"})

# node type -> its other fields, in _fields order; None (a Dict's `**x` key, a missing kw default) has none
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {type(None): ()}


def _child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
    return fields


class _Ctx(NamedTuple):
    function: str  # local qualname: "f", "Cls.m", "<module>", "<main>"
    cls: str | None
    guards: tuple[tuple[ast.expr, bool], ...]  # (condition, taken) pairs around the code
    locals: tuple[tuple[str, str], ...] = ()  # nested defs visible by name -> local qualname
    block: tuple[int, ...] = ()  # the bodies (if/for/while/try/match) around the code, outermost first


def dotted(node: ast.expr) -> str | None:
    """'a.b.c' for Name/Attribute chains, else None."""
    if type(node) is ast.Name:  # the commonest case, without the list
        return node.id
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _dotted_string(value: object) -> str | None:
    if type(value) is str and "." in value and len(value) < 200 and DOTTED_STRING.fullmatch(value):
        return value
    return None


def _unsubscripted(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


class FactsBase:
    """One file's walk state; see ``facts.FileFacts`` for the whole.

    ``module``: the name its functions are keyed by (unique in a scan); ``name``: its dotted
    import name (relative imports resolve from it; default ``module``).
    """

    def __init__(self, module: str, source: str, is_package: bool = False, name: str | None = None) -> None:
        self.module = module
        name = name or module
        self.params: dict[str, set[str]] = {}
        self._positional: dict[str, list[str]] = {}  # function -> its positional parameters
        self._readers: dict[str, tuple[Callable[[str], bool], Callable[[str], ast.expr | None]]] = {}  # see _condition
        # id(ctx) -> its `if` conditions, and whether they use a parameter (see _seed_condition)
        self._guard_conditions: dict[int, tuple[C.Expr, bool]] = {}
        self.bound: set[str] = set()
        self.package = name if is_package else name.rpartition(".")[0]
        self.is_test_module = E.is_test_module(name)
        self.lines = source.splitlines()
        self._suppresses = "detaudit" in source  # one search of the text, not one per line (see facts)
        self.imports: dict[str, str] = {}
        self.top_level: set[str] = set()
        self.functions: dict[str, FunctionFacts] = {}
        self.classes: dict[str, ClassFacts] = {}
        self.calls: list[tuple[ast.Call, _Ctx, ast.stmt | None]] = []
        self.entries: list[EntryFacts] = []
        self.fixtures: list[FixtureFacts] = []
        self.hooks: list[ast.expr] = []
        self.strings: set[str] = set()
        self.string_attrs: dict[str, set[str]] = {}  # dotted string -> attributes / options it is assigned to
        self.binds: list[tuple[str, ast.Call, _Ctx]] = []  # (key, the call whose result is bound, ctx)
        self.values: dict[tuple[str, str], list[ast.expr]] = {}  # (scope, name or "self.x") -> values assigned
        self.returns: list[tuple[ast.Call, _Ctx]] = []
        self.returned_names: list[tuple[str, _Ctx]] = []  # `return x`: a factory may return a local it built
        # Names and ``self.x`` whose class an annotation gives (``def f(self, s: Strategy)``,
        # ``self.s: Strategy``, ``self.s = s`` of an annotated parameter): (bind key, class as resolved)
        self.typed: list[tuple[str, str]] = []
        self._annotated: dict[str, dict[str, str]] = {}  # function -> its annotated parameters -> class
        self.table_returns: list[tuple[ast.expr, _Ctx]] = []  # `return TABLE[key]`: (the subscript or .get call, ctx)
        # What the file's code mentions by name (attributes, its own top-level defs, imported names,
        # identifier strings passed to a call): a function or method no code names cannot be called by name.
        self.names: set[str] = set()
        # Identifier strings anywhere else (assigned, listed, compared, `__all__`): they name a
        # function only where a lookup by a run-time name can reach it (``lookups``).
        self.string_names: set[str] = set()
        # Uses of the file's own top-level defs by a bare name (a call from a sibling function):
        # name -> the local qualnames of the code using it. Such a def is reachable only when one
        # of them is (evidence.Naming.named), so they are kept apart from ``names``.
        self.local_uses: dict[str, set[str]] = {}
        self.script_strings: set[str] = set()  # strings naming a .py file: a launcher's command line
        # Owners of lookups by a name taken from a value (``getattr(x, cfg.fn)``): qualified as
        # written here, '' when unknown. See evidence.Naming.
        self.lookups: set[str] = set()
        self.imported: set[str] = set()  # modules its import statements name (with what may be attributes)
        self.star_import = False
        self._no_names = self.is_test_module or E.is_conftest(name)
        self.reflecting: set[str] = set()  # functions that list an object's attributes (dir, vars, __dict__)
        # objects whose attributes are listed and so can be taken without a name (x.__dict__,
        # vars(x), inspect.getmembers(x)): (the object, or None for the module itself, its ctx)
        self._listed: list[tuple[ast.expr | None, _Ctx]] = []
        self.registrars: dict[str, str] = {}  # top-level function -> module-level dict it stores a parameter in
        self._test_classes: set[str] = set()
        # A file outside any package that does work at its top level is a script: `python x.py`
        # (or `accelerate launch x.py`) runs its body.
        self.script = False
        self._top = "." not in name and not self.is_test_module and not E.is_conftest(name) and not is_package
        self._blocks = 0
        self._unparsed: dict[int, str] = {}  # id(an if's test) -> its text
        self._shared_guards: dict[int, tuple[_Ctx, list[str]]] = {}  # id(ctx) -> (ctx, its guard texts)
        self._stmt: ast.stmt | None = None
        self._scopes: dict[str, ast.AST] = {}  # local qualname -> its node (where a drawn value's uses are found)
        self._walked: dict[str, Scope] = {}  # local qualname -> its walk for impact.py (made for its first draw)
        self._objects = "Pipeline" in source  # a rule's object kind (rules.OBJECT_KINDS) can be named here
        self._function(MODULE_BODY, None, 0)

    def _function(self, qual: str, cls: str | None, line: int) -> None:
        # "sites": (line, positional count, keywords) of each call in "calls", for generator=None guards
        self.functions.setdefault(qual, {"line": line, "calls": [], "sites": [], "seeds": [], "cls": cls})

    def resolve(self, name: str | None, ctx: _Ctx) -> str | None:
        """A dotted name as a fully qualified one, through imports, aliases and definitions."""
        if name is None:
            return None
        head, _, rest = name.partition(".")
        tail = f".{rest}" if rest else ""
        if head in ("self", "cls") and ctx.cls is not None:
            return f"{self.module}.{ctx.cls}{tail}" if rest else None
        for local, qual in reversed(ctx.locals):
            if local == head:
                return f"{self.module}.{qual}{tail}"
        if head in self.imports:
            return self.imports[head] + tail
        if head in self.top_level:
            return f"{self.module}.{head}{tail}"
        if head in _BUILTINS and not rest:
            return head
        return None

    def _bind_key(self, target: ast.expr, ctx: _Ctx) -> str | None:
        """The name a call's result is bound to, as later calls of it will spell it."""
        if isinstance(target, ast.Name):
            if ctx.function in (MODULE_BODY, MAIN_BLOCK):
                return f"{self.module}.{target.id}"
            return f"{self.module}.{ctx.function}{LOCAL}{target.id}"
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and ctx.cls is not None:
            return f"{self.module}.{ctx.cls}.{target.attr}"
        return None

    def _values_of(self, node: ast.expr, ctx: _Ctx) -> list[ast.expr]:
        """What a local name (or ``self.x``) was assigned in its function, class or module."""
        if isinstance(node, ast.Name):
            return self.values.get((ctx.function, node.id)) or self.values.get((MODULE_BODY, node.id)) or []
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and ctx.cls is not None:
            return self.values.get((ctx.cls, f"self.{node.attr}"), [])
        return []

    def _source_of(self, node: ast.expr) -> str:
        """The node's code as written (its first line when it spans several), at most 120 characters."""
        line = self.lines[node.lineno - 1] if 0 < node.lineno <= len(self.lines) else ""
        end = node.end_col_offset if node.end_lineno == node.lineno else None
        text = line.encode("utf-8")[node.col_offset:end].decode("utf-8", "replace").strip()
        if end is None:
            text += " ..."
        return text if len(text) <= 120 else text[:117] + "..."

    def _annotation_class(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> str | None:
        """The class an annotation names (``Strategy``, ``"Strategy"``, ``Optional[Strategy]``,
        ``Strategy | None``) as resolved here, or None: a library's type, a container, nothing."""
        if depth > 3:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
            sides = [n for n in (node.left, node.right) if not (isinstance(n, ast.Constant) and n.value is None)]
            return self._annotation_class(sides[0], ctx, depth + 1) if len(sides) == 1 else None
        if isinstance(node, ast.Subscript):
            wrapper = self.resolve(dotted(node.value), ctx) or ""
            if wrapper in ("typing.Optional", "typing_extensions.Optional"):
                return self._annotation_class(node.slice, ctx, depth + 1)
            if wrapper in ("typing.Union", "typing_extensions.Union") and isinstance(node.slice, ast.Tuple):
                sides = [n for n in node.slice.elts if not (isinstance(n, ast.Constant) and n.value is None)]
                return self._annotation_class(sides[0], ctx, depth + 1) if len(sides) == 1 else None
            return None
        name = self.resolve(dotted(node), ctx)
        if name is None or name.partition(".")[0] in LIBRARY_HEADS:
            return None
        return name

    def _holds_generator(self, receiver: str, ctx: _Ctx) -> bool:
        """``receiver`` (a name or ``self.x``) is named as, or assigned, a generator object of its own."""
        if not receiver:
            return False
        if generator_holder(receiver):
            return True
        node: ast.expr = ast.Name(receiver) if "." not in receiver else ast.Attribute(ast.Name("self"), receiver[5:]) \
            if receiver.startswith("self.") and receiver.count(".") == 1 else ast.Name("")
        return any(isinstance(v, ast.Call) and self.resolve(dotted(v.func), ctx) in GENERATOR_MAKERS
                   for v in self._values_of(node, ctx))

    def _condition(self, node: ast.expr, ctx: _Ctx) -> C.Expr:
        """``node`` as a condition over the parameters of the function it is in (see conditions)."""
        readers = self._readers.get(ctx.function) or self._make_readers(ctx.function)
        return C.encode(node, *readers)

    def _make_readers(self, function: str) -> tuple[Callable[[str], bool], Callable[[str], ast.expr | None]]:
        """(is_param, value_of) of ``function``, for conditions.encode (made once per function)."""
        params = self.params.get(function, ())
        values = self.values

        def is_param(name: str) -> bool:  # a parameter the function never reassigns
            return name in params and (function, name) not in values

        def value_of(name: str) -> ast.expr | None:  # a local assigned once
            assigned = values.get((function, name))
            return assigned[0] if assigned is not None and len(assigned) == 1 else None

        readers = self._readers[function] = (is_param, value_of)
        return readers
