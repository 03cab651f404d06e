"""Per-file facts for scan-rng, from Python's ``ast`` (the scanned code is never imported or run).

A file's facts are plain data (dicts, lists, strings), so they can be cached by content:
its functions and the calls each makes (names resolved through imports and aliases),
the seeds each makes, the global-RNG draws (with their guard conditions and the calls made
before them in their function), the process entry points it declares (see ``entries``),
pytest fixtures, Ray worker setup hooks, dotted-path strings (with the attribute or option
each is assigned to), and suppression comments.

The walker (``FileFacts``) dispatches on the statement's node type; which calls are draws is
the rules' business (``rules.RULE_LIST``), which are entry points is ``entries``'.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from detaudit.scan import conditions as C
from detaudit.scan import entries as E
from detaudit.scan.impact import Scope, impact
from detaudit.scan.rules import (
    BUILTIN_LOADERS,
    CALLING_LOADERS,
    DIFFUSERS_PIPELINE,
    ENTROPY_CALLS,
    GENERATOR_MAKERS,
    RULES_BY_CALLEE,
    RULES_BY_METHOD,
    RULES_BY_OBJECT,
    SEED_CALLS,
    SEED_FLAGS,
    CallSite,
    Rule,
    generator_holder,
    seed_families,
    seed_like,
)

FACTS_VERSION = 18
# Statements after which the rest of their block never runs.
_ENDS_BLOCK = frozenset({ast.Raise, ast.Return, ast.Break, ast.Continue})
MODULE_BODY = "<module>"
MAIN_BLOCK = "<main>"
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


_MODULE_FLAGS = ("-m", "--module")


def _module_flags(items: list[ast.expr]) -> list[str]:
    """"-m NAME" for each constant "-m" (or "--module") followed by a constant module name: a
    command line that runs a module (``["python", "-m", "train"]``)."""
    out = []
    for flag, name in zip(items, items[1:], strict=False):
        if type(flag) is ast.Constant and flag.value in _MODULE_FLAGS and type(name) is ast.Constant \
                and type(name.value) is str and name.value.replace(".", "_").isidentifier():
            out.append(f"-m {name.value}")
    return out


def _template(node: ast.JoinedStr) -> str | None:
    """An f-string that may hold a command line, with ``${_}`` for each value it formats (the
    launch search's template form), or None when it names no .py file and holds no ``-m``."""
    parts = []
    for value in node.values:
        if type(value) is ast.Constant and isinstance(value, ast.Constant) and type(value.value) is str:
            parts.append(value.value)
        else:
            parts.append("${_}")
    text = "".join(parts)
    return text if (".py" in text or "-m" in text) and len(text) <= MAX_SCRIPT_STRING else None


def _child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
    return fields


# A diffusers pipeline class in a qualified name: StableDiffusion3Pipeline, AutoPipelineForText2Image.
_PIPELINE_CLASS = re.compile(r"(?:^|\.)(?:[A-Za-z0-9_]*Pipeline|AutoPipeline[A-Za-z0-9_]*)(?:\.|$)")
# Methods of a module or pipeline that return the object itself.
_SAME_OBJECT = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "eval", "train", "requires_grad_"})
# A string literal that names a module attribute by dotted path ("pkg.mod.fn" or "pkg.mod:fn").
DOTTED_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")
_CONSOLE_SCRIPT = re.compile(r"\s*[A-Za-z0-9_.-]+\s*=\s*([A-Za-z_][A-Za-z0-9_.]*)\s*:\s*[A-Za-z_][A-Za-z0-9_.]*\s*(?:\[.*\])?\s*")
# A longer string naming a .py file or holding "-m" is data; a docstring's "Usage: python -m pkg.train"
# is a launch like a README's.
MAX_SCRIPT_STRING = 64 * 1024
LOCAL = ".<local>."  # key part of a function-local name: "mod.f.<local>.fn"
TABLE = ".<table>"  # "mod.LOSSES.<table>": a call of an entry of the dict mod.LOSSES
SUPER = ".<super>."  # "mod.Cls.<super>.m": super().m() inside Cls
# Decorators that leave a function callable only through its own name (they wrap it, or mark it):
# a function decorated otherwise may be registered somewhere (``@register("x")``, ``@app.route``).
PLAIN_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "abc.abstractmethod", "functools.cache", "functools.lru_cache",
    "functools.cached_property", "functools.wraps", "contextlib.contextmanager", "contextlib.asynccontextmanager",
    "torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.compile", "torch.jit.script",
    "torch.jit.ignore", "torch.jit.unused", "typing.override", "typing_extensions.override", "typing.overload",
    "typing.final", "dataclasses.dataclass", "override", "overload",
})
PLAIN_DECORATOR_NAMES = frozenset({"setter", "getter", "deleter"})  # @x.setter of a property
_SUPPRESS = re.compile(r"#\s*detaudit:\s*ignore(?:\[([A-Za-z0-9_,\s]+)\])?")


class _Ctx(NamedTuple):
    function: str  # local qualname: "f", "Cls.m", "<module>", "<main>"
    cls: str | None
    guards: tuple[tuple[ast.expr, bool], ...]  # (condition, taken) pairs around the code
    locals: tuple[tuple[str, str], ...] = ()  # nested defs visible by name -> local qualname
    block: tuple[int, ...] = ()  # the bodies (if/for/while/try/match) around the code, outermost first


def dotted(node: ast.expr) -> str | None:
    """'a.b.c' for Name/Attribute chains, else None."""
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


class FileFacts:
    """Walks one module; ``facts()`` returns its plain-data facts.

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
        self.functions: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[ast.Call, _Ctx, ast.stmt | None]] = []
        self.entries: list[dict[str, Any]] = []
        self.fixtures: list[dict[str, Any]] = []
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
        self._handlers: dict[type[ast.AST], Callable[[Any, _Ctx], None]] = {
            ast.FunctionDef: self._def, ast.AsyncFunctionDef: self._def, ast.ClassDef: self._class,
            ast.If: self._if, ast.For: self._loop, ast.AsyncFor: self._loop, ast.While: self._loop,
            ast.Try: self._try, ast.TryStar: self._try, ast.Match: self._match,
            ast.Import: self._import, ast.ImportFrom: self._import_from,
            ast.Assign: self._assign, ast.AnnAssign: self._ann_assign, ast.Return: self._return,
            ast.With: self._with, ast.AsyncWith: self._with,
        }
        self._function(MODULE_BODY, None, 0)

    # -- walking -------------------------------------------------------------------------

    def _function(self, qual: str, cls: str | None, line: int) -> None:
        # "sites": (line, positional count, keywords) of each call in "calls", for generator=None guards
        self.functions.setdefault(qual, {"line": line, "calls": [], "sites": [], "seeds": [], "cls": cls})

    def run(self, tree: ast.Module) -> FileFacts:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.top_level.add(node.name)
            elif isinstance(node, (ast.For, ast.While, ast.With)) or (
                    isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
                self.script = True  # work done at the top level of the file
        self._scopes[MODULE_BODY] = self._scopes[MAIN_BLOCK] = tree
        self.body(tree.body, _Ctx(MODULE_BODY, None, ()))
        return self

    def body(self, stmts: list[ast.stmt], ctx: _Ctx) -> None:
        nested = {s.name for s in stmts if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if nested and ctx.function not in (MODULE_BODY, MAIN_BLOCK) and ctx.cls != ctx.function:
            prefix = ctx.function
            ctx = _Ctx(ctx.function, ctx.cls, ctx.guards, ctx.locals + tuple((n, f"{prefix}.{n}") for n in nested),
                       ctx.block)
        handlers = self._handlers
        for stmt in stmts:
            self._stmt = stmt
            handler = handlers.get(type(stmt))
            if handler is None:
                self._children(stmt, ctx)
            else:
                handler(stmt, ctx)
            if type(stmt) in _ENDS_BLOCK:
                # What follows a raise/return/break/continue in the same block never runs: its
                # draws are not draws (the dead `if use_diffusion: raise ...; torch.randn(...)`).
                break

    def _block(self, ctx: _Ctx, guard: tuple[ast.expr, bool] | None = None) -> _Ctx:
        """``ctx`` inside a new body (that may not run), under ``guard`` when it is an ``if`` branch."""
        self._blocks += 1
        guards = ctx.guards + (guard,) if guard is not None else ctx.guards
        return _Ctx(ctx.function, ctx.cls, guards, ctx.locals, ctx.block + (self._blocks,))

    def _children(self, node: ast.AST, ctx: _Ctx) -> None:
        """Walk a statement's expressions, and its bodies in ``ctx`` (a ``with`` body always runs)."""
        kind = type(node)
        for name in _CHILD_FIELDS.get(kind) or _child_fields(kind):
            value = getattr(node, name, None)
            if type(value) is list:
                if value and isinstance(value[0], ast.stmt):
                    self.body(value, ctx)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.exprs(item, ctx)
            elif isinstance(value, ast.AST):
                self.exprs(value, ctx)

    def _assign(self, node: ast.Assign, ctx: _Ctx) -> None:
        for target in node.targets:
            self._assigned(target, node.value, ctx)
        self._children(node, ctx)

    def _with(self, node: ast.With | ast.AsyncWith, ctx: _Ctx) -> None:
        for item in node.items:  # `with Pool(4) as pool:` binds pool as an assignment does
            if item.optional_vars is not None and isinstance(item.optional_vars, (ast.Name, ast.Attribute)):
                self._assigned(item.optional_vars, item.context_expr, ctx)
        self._children(node, ctx)

    def _ann_assign(self, node: ast.AnnAssign, ctx: _Ctx) -> None:
        target = node.target
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and ctx.cls is not None or isinstance(target, ast.Name) and ctx.cls is not None and ctx.function == ctx.cls:
            cls_name = self._annotation_class(node.annotation, ctx)  # self.s: Strategy, or a class field s: Strategy
            if cls_name is not None:
                attr = target.attr if isinstance(target, ast.Attribute) else target.id
                self.typed.append((f"{self.module}.{ctx.cls}.{attr}", cls_name))
        if node.value is not None:
            self._assigned(node.target, node.value, ctx)
        self._children(node, ctx)

    def _assigned(self, target: ast.expr, value: ast.expr, ctx: _Ctx) -> None:
        """Remember what a name or ``self.x`` is assigned: a call's result, an alias, a dotted string."""
        calls = [value] if isinstance(value, ast.Call) else [
            v for v in (value.body, value.orelse) if isinstance(v, ast.Call)] if isinstance(value, ast.IfExp) else []
        if calls:
            key = self._bind_key(target, ctx)
            if key is not None:
                self.binds.extend((key, call, ctx) for call in calls)
        if isinstance(target, ast.Name):
            self.values.setdefault((ctx.function, target.id), []).append(value)
            attr = target.id
        elif isinstance(target, ast.Attribute):
            if isinstance(target.value, ast.Name) and target.value.id == "self" and ctx.cls is not None:
                self.values.setdefault((ctx.cls, f"self.{target.attr}"), []).append(value)
                if isinstance(value, ast.Name):  # self.s = s, of a parameter annotated with a class
                    cls_name = self._annotated.get(ctx.function, {}).get(value.id)
                    if cls_name is not None:
                        self.typed.append((f"{self.module}.{ctx.cls}.{target.attr}", cls_name))
            attr = target.attr
        else:
            if isinstance(target, ast.Subscript):
                self._registers(target, value, ctx)
            return
        for constant in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
            if isinstance(constant, ast.Constant):
                text = _dotted_string(constant.value)
                if text is not None:
                    self.string_attrs.setdefault(text, set()).add(attr)

    def _registers(self, target: ast.Subscript, value: ast.expr, ctx: _Ctx) -> None:
        """``TABLE[key] = fn``, ``fn`` a parameter of the function around it and ``TABLE`` a dict of
        the module (or one it imports): the top-level function that holds it registers what it is
        given, as a decorator (``@register("clip_cov")``, through its inner function) or a call."""
        if not (isinstance(target.value, ast.Name) and isinstance(value, ast.Name)) or ctx.cls is not None:
            return
        registrar = ctx.function.partition(".")[0]
        if value.id not in self.params.get(ctx.function, ()) or registrar not in self.top_level \
                or registrar in self.classes:
            return
        table = target.value.id
        if (ctx.function, table) in self.values:
            return  # a local dict
        if (MODULE_BODY, table) in self.values:
            self.registrars[registrar] = f"{self.module}.{table}"
        elif table in self.imports:
            self.registrars[registrar] = self.imports[table]

    def _return(self, node: ast.Return, ctx: _Ctx) -> None:
        if isinstance(node.value, ast.Name):
            self.returned_names.append((node.value.id, ctx))
        if isinstance(node.value, ast.Subscript):
            self.table_returns.append((node.value, ctx))  # return TABLE[key]: what calling it runs
        if isinstance(node.value, ast.Call):
            self.returns.append((node.value, ctx))
        elif isinstance(node.value, ast.IfExp):
            self.returns.extend((v, ctx) for v in (node.value.body, node.value.orelse) if isinstance(v, ast.Call))
        self._children(node, ctx)

    def _if(self, node: ast.If, ctx: _Ctx) -> None:
        if ctx.function == MODULE_BODY and _is_main_test(node.test):
            self._function(MAIN_BLOCK, None, node.lineno)
            self.body(node.body, _Ctx(MAIN_BLOCK, None, ()))
            self.body(node.orelse, ctx)
            return
        self.exprs(node.test, ctx)
        self.body(node.body, self._block(ctx, (node.test, True)))
        if node.orelse:
            self.body(node.orelse, self._block(ctx, (node.test, False)))

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While, ctx: _Ctx) -> None:
        # The body may run no time at all: a seed in it does not precede what follows the loop.
        if isinstance(node, ast.While):
            self.exprs(node.test, ctx)
        else:
            self.exprs(node.iter, ctx)
            self.exprs(node.target, ctx)
        self.body(node.body, self._block(ctx))
        if node.orelse:
            self.body(node.orelse, self._block(ctx))

    def _try(self, node: ast.Try | ast.TryStar, ctx: _Ctx) -> None:
        self.body(node.body, self._block(ctx))
        for handler in node.handlers:
            if handler.type is not None:
                self.exprs(handler.type, ctx)
            self.body(handler.body, self._block(ctx))
        if node.orelse:
            self.body(node.orelse, self._block(ctx))
        self.body(node.finalbody, ctx)  # always runs

    def _match(self, node: ast.Match, ctx: _Ctx) -> None:
        self.exprs(node.subject, ctx)
        for case in node.cases:
            if case.guard is not None:
                self.exprs(case.guard, ctx)
            self.body(case.body, self._block(ctx))

    def _import(self, node: ast.Import, ctx: _Ctx) -> None:
        for alias in node.names:
            self.imported.add(alias.name)
            if alias.asname:
                self.imports[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.imports.setdefault(head, head)

    def _import_from(self, node: ast.ImportFrom, ctx: _Ctx) -> None:
        base = self._from_module(node)
        if base:
            self.imported.add(base)
        for alias in node.names:
            if alias.name == "*":
                self.star_import = True  # its names are used bare: every name the file uses counts
            else:
                self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
                self.imported.add(f"{base}.{alias.name}" if base else alias.name)  # a module, or a name in one
                if not self._no_names:
                    self.names.add(alias.name)

    def _from_module(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.package.split(".") if self.package else []
        if node.level > 1:
            parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts)
        if node.module:
            base = f"{base}.{node.module}" if base else node.module
        return base

    def _def(self, node: ast.FunctionDef | ast.AsyncFunctionDef, ctx: _Ctx) -> None:
        in_class = ctx.cls is not None and ctx.function == ctx.cls
        if in_class:
            qual = f"{ctx.cls}.{node.name}"
        elif ctx.function in (MODULE_BODY, MAIN_BLOCK):
            qual = node.name
        else:
            qual = f"{ctx.function}.{node.name}"
        cls = ctx.cls if in_class else None
        self._function(qual, cls, node.lineno)
        self._scopes[qual] = node
        if ctx.function == MAIN_BLOCK:
            self.functions[qual]["in_main"] = True  # defined by the `__main__` block (outside.py)
        if cls is not None:
            self.classes[cls]["methods"].append(qual)
        none_params = _none_params(node.args, cls is not None)
        if none_params:
            self.functions[qual]["none_params"] = none_params
        arguments = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
        self.params[qual] = set(arguments)
        self._positional[qual] = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]

        uses = [a for a in arguments if a not in ("self", "cls")]
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
            cls_name = self._annotation_class(arg.annotation, ctx) if arg.annotation is not None else None
            if cls_name is not None:
                self._annotated.setdefault(qual, {})[arg.arg] = cls_name
                self.typed.append((f"{self.module}.{qual}{LOCAL}{arg.arg}", cls_name))
        for dec in node.decorator_list:
            self.exprs(dec, ctx)
            self._decorator(dec, qual, node, uses, cls, ctx)
        decorators = self._decorators(node.decorator_list)
        if decorators:
            self.functions[qual]["decorators"] = decorators
        top = ctx.function in (MODULE_BODY, MAIN_BLOCK) or cls in self._test_classes
        if self.is_test_module and top and E.is_test_function(node.name):
            self.entries.append({"kind": "test", "target": f"{self.module}.{qual}", "line": node.lineno,
                                 "uses": uses, "cls": f"{self.module}.{cls}" if cls else ""})
        inner = _Ctx(qual, cls, (), ctx.locals)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.exprs(default, ctx)
        self.body(node.body, inner)

    def _decorator(self, dec: ast.expr, qual: str, node: ast.FunctionDef | ast.AsyncFunctionDef, uses: list[str],
                   cls: str | None, ctx: _Ctx) -> None:
        """Entry points and pytest fixtures that a function's decorator declares."""
        func = dec.func if isinstance(dec, ast.Call) else dec
        written = dotted(func)
        name = self.resolve(written, _Ctx(MODULE_BODY, None, ())) or ""
        if name == E.RAY_REMOTE:
            self.entries.append({"kind": "ray-task", "target": f"{self.module}.{qual}", "line": node.lineno})
        elif name in E.PYTEST_FIXTURES:
            keywords = {k.arg: k.value for k in dec.keywords} if isinstance(dec, ast.Call) else {}
            autouse = keywords.get("autouse")
            alias = keywords.get("name")
            self.fixtures.append({
                "name": alias.value if isinstance(alias, ast.Constant) and isinstance(alias.value, str) else node.name,
                "target": f"{self.module}.{qual}", "uses": uses, "cls": f"{self.module}.{cls}" if cls else "",
                "autouse": isinstance(autouse, ast.Constant) and autouse.value is True})
        elif self._is_cli_decorator(written, name):
            self.entries.append({"kind": "cli", "target": f"{self.module}.{qual}", "line": node.lineno})

    def _decorators(self, decorators: list[ast.expr]) -> list[str]:
        """What each decorator that may register or replace the function calls ('?': not a name),
        leaving out those that keep it callable by its own name only (see PLAIN_DECORATORS)."""
        out = []
        for dec in decorators:
            written = dotted(dec.func if isinstance(dec, ast.Call) else dec)
            name = (self.resolve(written, _Ctx(MODULE_BODY, None, ())) or written) if written else "?"
            if name not in PLAIN_DECORATORS and name.rpartition(".")[2] not in PLAIN_DECORATOR_NAMES:
                out.append(name)
        return out

    def _is_cli_decorator(self, written: str | None, name: str) -> bool:
        """``@click.command()``, ``@click.group()``, ``@typer_app.command()``, ``@cli.command()``."""
        if written is None or written.rpartition(".")[2] not in E.CLI_DECORATOR_METHODS:
            return False
        if name.split(".")[0] in E.CLI_DECORATOR_MODULES:
            return True
        owner = written.rpartition(".")[0]
        # a click group or typer app of this module, in a module that imports click or typer
        return "." not in owner and (owner in self.top_level or (MODULE_BODY, owner) in self.values) and any(
            v.split(".")[0] in E.CLI_DECORATOR_MODULES for v in self.imports.values())

    def _class(self, node: ast.ClassDef, ctx: _Ctx) -> None:
        qual = node.name if ctx.function in (MODULE_BODY, MAIN_BLOCK) else f"{ctx.function}.{node.name}"
        # Base[T] is Base; a base that is no dotted name (a call's result) is opaque: a library's, maybe
        bases = [self.resolve(dotted(_unsubscripted(b)), ctx) or dotted(_unsubscripted(b)) for b in node.bases]
        self.classes[qual] = {"line": node.lineno, "methods": [], "bases": [b for b in bases if b]}
        if None in bases:
            self.classes[qual]["opaque_bases"] = True
        decorators = self._decorators(node.decorator_list)
        if decorators:
            self.classes[qual]["decorators"] = decorators
        if self.is_test_module and qual == node.name and E.is_test_class(node.name, [b for b in bases if b]):
            self._test_classes.add(qual)
        if ctx.function == MAIN_BLOCK:
            self.classes[qual]["in_main"] = True
        self._function(qual, None, node.lineno)  # the class body runs at import time
        for dec in node.decorator_list:
            self.exprs(dec, ctx)
            if self.resolve(dotted(dec.func if isinstance(dec, ast.Call) else dec), _Ctx(MODULE_BODY, None, ())) \
                    == E.RAY_REMOTE:
                self.entries.append({"kind": "ray-actor", "target": f"{self.module}.{qual}", "line": node.lineno})
        self.body(node.body, _Ctx(qual, qual, (), ctx.locals))

    def exprs(self, node: ast.AST, ctx: _Ctx) -> None:
        # Breadth-first, in ast.walk's order (call order decides which dispatch path a finding
        # names), but without its generators and without visiting leaves: ~3x faster.
        todo: list[Any] = [node]  # Any: each node's type is told by `kind is X`, not by isinstance (~5 % of the walk)
        stmt = self._stmt
        names, own, every, strings = self.names, self.top_level, self.star_import, self.string_names
        uses, scripts = self.local_uses, self.script_strings
        if self._no_names:  # test code: what it names never counts (what it launches does: an e2e test's run)
            names, own, every, strings = set(), set(), False, set()
        for sub in todo:  # the list grows while it is read: that is the queue
            kind = type(sub)
            if kind is ast.Name:
                if every:  # a star import: every bare name may be one of another module's defs
                    names.add(sub.id)
                elif sub.id in own:  # a use of one of its own top-level defs
                    known = uses.get(sub.id)
                    if known is None:
                        uses[sub.id] = {ctx.function}
                    else:
                        known.add(ctx.function)
                continue
            if kind is ast.Attribute:
                names.add(sub.attr)
                if sub.attr == "__dict__":
                    self.reflecting.add(ctx.function)
                    self._listed.append((sub.value, ctx))  # x.__dict__[name]: any attribute of x
            elif kind is ast.Call:
                self.calls.append((sub, ctx, stmt))
                # an identifier string passed to a call: the callee may look it up (getattr(actor, "m"),
                # group.run_all("m"), group.run_all(method="m"))
                flagged = False  # a "-m" among the arguments: session.run("python", "-m", "train")
                for arg in sub.args:
                    if type(arg) is ast.Constant and type(arg.value) is str:
                        if arg.value.isidentifier():
                            names.add(arg.value)
                        elif arg.value in _MODULE_FLAGS:
                            flagged = True
                if flagged:
                    scripts.update(_module_flags(sub.args))
                elif sub.args and isinstance(sub.func, ast.Attribute) and sub.func.attr == "run_module":
                    scripts.update(_module_flags([ast.Constant("-m"), sub.args[0]]))  # runpy.run_module("train")
                for keyword in sub.keywords:
                    given = keyword.value
                    if type(given) is ast.Constant and isinstance(given, ast.Constant):
                        if type(given.value) is str and given.value.isidentifier():
                            names.add(given.value)
                        if keyword.arg:
                            text = _dotted_string(given.value)
                            if text is not None:
                                self.string_attrs.setdefault(text, set()).add(_option_attr(sub, keyword.arg))
            elif kind is ast.Constant:
                value = sub.value
                if type(value) is str:
                    if value.isidentifier():
                        strings.add(value)  # see string_names
                    else:
                        text = _dotted_string(value)
                        if text is not None:
                            self.strings.add(text)
                            names.add(text.replace(":", ".").rpartition(".")[2])  # "pkg.mod.fn"
                        elif (".py" in value or "-m" in value) and len(value) <= MAX_SCRIPT_STRING:
                            scripts.add(value)  # "python pkg/train.py", "torchrun -m pkg.train": a launch (outside.py)
                        elif "=" in value and ":" in value:
                            script = _CONSOLE_SCRIPT.fullmatch(value)  # "x-train = pkg.train:main"
                            if script:
                                scripts.add(f"-m {script.group(1)}")
                continue
            elif (kind is ast.List or kind is ast.Tuple):
                scripts.update(_module_flags(sub.elts))  # ["python", "-m", "train"]
            elif kind is ast.JoinedStr:
                template = _template(sub)  # f"python -m pkg.{algo}": a launch of each module the pattern matches
                if template is not None:
                    scripts.add(template)
            elif kind is ast.Dict:
                for key, entry in zip(sub.keys, sub.values, strict=False):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        if key.value == "worker_process_setup_hook":
                            self.hooks.append(entry)
                        elif isinstance(entry, ast.Constant):
                            text = _dotted_string(entry.value)
                            if text is not None:
                                self.string_attrs.setdefault(text, set()).add(key.value)
            fields = _CHILD_FIELDS.get(kind)
            for name in fields if fields is not None else _child_fields(kind):
                child = getattr(sub, name, None)
                if type(child) is list:
                    todo.extend(child)  # expressions, or None: visited as a node without fields
                elif child is not None:
                    todo.append(child)

    # -- resolution -----------------------------------------------------------------------

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

    def call_name(self, call: ast.Call, ctx: _Ctx) -> tuple[str | None, str | None]:
        """(dotted name as written, what the call denotes: a qualified name or a dispatch key)."""
        func = call.func
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" \
                and len(func.args) >= 2 and isinstance(func.args[1], ast.Constant) and isinstance(func.args[1].value, str):
            owner = dotted(func.args[0])  # getattr(module, "fn")(...) is module.fn(...)
            if owner is not None:
                written = f"{owner}.{func.args[1].value}"
                return written, self.resolve(written, ctx)
        name = dotted(func)
        resolved = self.resolve(name, ctx)
        if resolved is not None or ctx.function == MODULE_BODY:
            return name, resolved
        if name is not None:
            # A name bound to a call's result (maybe a loaded function): keep it as a dispatch key.
            head, _, rest = name.partition(".")
            if head in ("self", "cls"):
                return name, None
            tail = f".{rest}" if rest else ""
            module_key = f"{self.module}.{head}"
            if ctx.function == MAIN_BLOCK:
                return name, (module_key + tail if module_key in self.bound else None)
            local_key = f"{self.module}.{ctx.function}{LOCAL}{head}"
            if local_key in self.bound or module_key in self.bound:
                return name, local_key + tail
            return name, None
        # super().m(...) inside a class
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and ctx.cls is not None \
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super":
            return None, f"{self.module}.{ctx.cls}{SUPER}{func.attr}"
        # load(path)(...) and import_module(m).f(...): the result of a call, called
        inner = func.value if isinstance(func, ast.Attribute) else func
        if isinstance(inner, ast.Call):
            key = f"{self.module}.{ctx.function}@{inner.lineno}:{inner.col_offset}"
            self.binds.append((key, inner, ctx))
            return None, key + (f".{func.attr}" if isinstance(func, ast.Attribute) else "")
        return None, None

    def _values_of(self, node: ast.expr, ctx: _Ctx) -> list[ast.expr]:
        """What a local name (or ``self.x``) was assigned in its function, class or module."""
        if isinstance(node, ast.Name):
            return self.values.get((ctx.function, node.id)) or self.values.get((MODULE_BODY, node.id)) or []
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and ctx.cls is not None:
            return self.values.get((ctx.cls, f"self.{node.attr}"), [])
        return []

    def entropy_of(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> str | None:
        """The per-run source (``time.time``) that ``node``'s value comes from, through locals, or None."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                written = dotted(sub.func)
                resolved = self.resolve(written, _Ctx(MODULE_BODY, None, ())) or written
                if resolved in ENTROPY_CALLS:
                    return resolved
            elif depth < 2 and isinstance(sub, (ast.Name, ast.Attribute)):
                for value in self._values_of(sub, ctx):
                    source = self.entropy_of(value, ctx, depth + 1)
                    if source:
                        return source
        return None

    def _targets(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> list[str]:
        """What an entry point's argument names: a function or class, through local aliases
        (``impl = FSDPActor`` ... ``ray.remote(impl)``), conditional ones and ``functools.partial``."""
        resolved = self.resolve(dotted(node), ctx)
        if resolved is not None:
            return [resolved]
        if depth > 3:
            return []
        if isinstance(node, ast.IfExp):
            return self._targets(node.body, ctx, depth + 1) + self._targets(node.orelse, ctx, depth + 1)
        if isinstance(node, ast.Call) and node.args and (self.resolve(dotted(node.func), ctx) or "") == "functools.partial":
            return self._targets(node.args[0], ctx, depth + 1)
        out: list[str] = []
        registry = node.value if isinstance(node, ast.Subscript) else node.func.value if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get") else None
        if registry is not None:  # REGISTRY[name] or REGISTRY.get(name): every function of a dict literal
            for table in self._values_of(registry, ctx):
                if isinstance(table, ast.Dict):
                    for value in table.values:
                        out += [t for t in self._targets(value, ctx, depth + 1) if t not in out]
            if not out:  # a table of another module, or one filled by a registering decorator: resolved by the analysis
                qualified = self.resolve(dotted(registry), ctx)
                if qualified is None and isinstance(registry, ast.Name) and (MODULE_BODY, registry.id) in self.values \
                        and (ctx.function, registry.id) not in self.values:
                    qualified = f"{self.module}.{registry.id}"
                if qualified is not None:
                    out.append(qualified + TABLE)
            return out
        for value in self._values_of(node, ctx):
            out += [t for t in self._targets(value, ctx, depth + 1) if t not in out]
        return out

    # -- facts ----------------------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        for returned, at in self.returned_names:  # x = Cls(...); return x: a factory of Cls
            self.returns.extend((v, at) for v in self.values.get((at.function, returned), ()) if isinstance(v, ast.Call))
        self.bound = {key for key, _, _ in self.binds} | {key for key, _ in self.typed}
        draws: list[dict[str, Any]] = []
        entries = self.entries
        loads: dict[str, set[str]] = {}  # function -> what it calls that marks a loader
        # function -> (block, index in its "calls", families it seeds) of each call so far, in order
        made: dict[str, list[tuple[tuple[int, ...], int, tuple[str, ...]]]] = {}
        # Attribute names the code builds at run time: [what owns them (qualified, '' unknown), a
        # regex of the names it can build]. See _built_name.
        dynamic: list[list[str]] = []
        for call, ctx, _ in self.calls:  # functions that list an object's attributes: dir(x), vars(x)
            func = call.func
            if (isinstance(func, ast.Name) and func.id in ("dir", "vars", "getmembers") and func.id not in self.imports) \
                    or (isinstance(func, ast.Attribute) and func.attr == "getmembers"):
                self.reflecting.add(ctx.function)
                if not (isinstance(func, ast.Name) and func.id == "dir"):  # dir() gives names only: see _built_name
                    self._listed.append((call.args[0] if call.args else None, ctx))
        for listed, ctx in self._listed:  # what is listed can be called: every attribute of it counts as named
            holder = self._listed_owner(listed, ctx)
            if holder is not None and not self._no_names:
                dynamic.append([holder, ".*"])
        for call, ctx, stmt in self.calls:
            name, resolved = self.call_name(call, ctx)
            function = self.functions[ctx.function]
            if name == "getattr" and "getattr" not in self.imports:
                loads.setdefault(ctx.function, set()).add("getattr")
                resolved = None
                if len(call.args) >= 2:
                    pattern = self._built_name(call.args[1], ctx)
                    if pattern or not isinstance(call.args[1], ast.Constant):
                        owner = dotted(call.args[0])
                        owner = f"{self.module}.{ctx.cls}" if owner in ("self", "cls") and ctx.cls else \
                            self.resolve(owner, ctx) or ""
                        if pattern:
                            dynamic.append([owner, pattern])
                        elif not self._no_names:
                            self.lookups.add(owner)
            elif resolved in ("operator.methodcaller", "operator.attrgetter") and call.args \
                    and not isinstance(call.args[0], ast.Constant) and not self._no_names:
                self.lookups.add("")  # methodcaller(cfg.method)(obj): any object's attribute
            elif name == "globals" and "globals" not in self.imports:  # globals()[name]: any function here
                dynamic.append([self.module, ".*"])
            elif resolved == "importlib.import_module" and call.args and isinstance(call.args[0], ast.Constant) \
                    and isinstance(call.args[0].value, str):
                self.imported.add(call.args[0].value)
            func = call.func
            attr = func.attr if isinstance(func, ast.Attribute) else None
            site: CallSite | None = None
            if (resolved is None or "@" in resolved) and isinstance(func, (ast.Name, ast.Subscript, ast.Call)):
                # fn = REGISTRY[name]; fn(x) / REGISTRY[name](x) / REGISTRY.get(name)(x): each function of the table
                for target in self._targets(func, ctx) if ctx.function != MODULE_BODY else ():
                    function["calls"].append(target)
                    function["sites"].append(_call_site(call, function.get("none_params", {})))
            if resolved is not None:
                index = len(function["calls"])
                function["calls"].append(resolved)
                function["sites"].append(_call_site(call, function.get("none_params", {})))
                if ctx.guards:  # a call under `if`: what it reaches runs only when the condition holds
                    shared = self._shared_guards.get(id(ctx))
                    if shared is None:  # one list per `if` body (pickled once), kept with its ctx alive
                        shared = self._shared_guards[id(ctx)] = (ctx, self._guard_texts(ctx))
                    function.setdefault("guarded_calls", []).append([index, shared[1], call.lineno])
                families: tuple[str, ...] = ()
                flag: C.Expr | None = None
                if resolved in SEED_CALLS:
                    site = self._site(call, resolved, attr, ctx, function)
                    families = seed_families(site)
                    given = site.argument(SEED_FLAGS[resolved]) if resolved in SEED_FLAGS else None
                    if given is not None:
                        flag = self._condition(given, ctx)
                        if C.known(flag) and C.false_for(flag, {}):
                            families = ()  # enable(seed, seed_rngs=False)
                    if families:
                        function["seeds"].extend(f for f in families if f not in function["seeds"])
                        function.setdefault("seed_at", {})[index] = list(families)
                if ctx.function != MODULE_BODY and not self._no_names:  # a test's seeding counts whole
                    self._seed_condition(call, ctx, function, index, flag)
                made.setdefault(ctx.function, []).append((ctx.block, index, families))
                if resolved in ("importlib.import_module", "getattr") or resolved in BUILTIN_LOADERS \
                        or resolved in CALLING_LOADERS:
                    loads.setdefault(ctx.function, set()).add(resolved)
            if name is not None and "eed" in name and not self._no_names and seed_like(resolved or name) \
                    and not self._holds_generator(name.rpartition(".")[0], ctx):
                # a seed the scan may not follow (a library's, an unknown object's): see Program.unresolved_seeding
                function.setdefault("maybe_seed", []).append(
                    [name, len(function["calls"]) - 1 if resolved is not None else -1, call.lineno])
            rules = self._rules(resolved, attr)
            if self._objects and (type(func) is ast.Name or type(func) is ast.Attribute):  # pipe(prompt): an object
                kind = self._object_kind(func, ctx)
                if kind:
                    rules = rules + RULES_BY_OBJECT[kind]
            for rule in rules:
                site = site or self._site(call, resolved, attr, ctx, function)
                message = rule.find(site)
                if message is not None:
                    prior = made.get(ctx.function, [])
                    if resolved is not None:
                        prior = prior[:-1]  # not the draw's own call
                    draws.append(self._draw(rule, message, site, ctx, stmt, prior))
            if (attr == "eval" or attr == "train") and isinstance(func, ast.Attribute) and not self._no_names:
                self._mode_call(func.value, attr, call, ctx, function)
            if attr in E.POOL_METHODS and call.args and isinstance(func, ast.Attribute):
                pool = self._pool_kind(func.value, ctx)
                if pool == "process":  # pool.map(fn, items): fn runs in a worker process
                    entries.extend({"kind": "pool", "target": t, "line": call.lineno}
                                   for t in self._targets(call.args[0], ctx))
                elif pool == "thread" and ctx.function != MODULE_BODY:  # in this process: a call of fn
                    for target in self._targets(call.args[0], ctx):
                        function["calls"].append(target)
                        function["sites"].append(_call_site(call, function.get("none_params", {})))
            # every entry form needs keywords (Process(target=...), worker_init_fn=), a call of a
            # call's result (ray.remote(num_gpus=1)(Cls)), or one of these callee names
            if call.keywords or type(func) is ast.Call or (
                    resolved is not None and resolved.rpartition(".")[2] in E.CALL_NAMES):
                entries.extend(self._entry(call, resolved, ctx))
        for qual, used in loads.items():
            # load_function(path): import_module + getattr, or a library loader, on its argument
            if ("importlib.import_module" in used and "getattr" in used) or used & (BUILTIN_LOADERS - {"importlib.import_module"}):
                self.functions[qual]["loader"] = True
        for node, ctx in self.table_returns:  # return TABLE[key]: calling the result runs a value of TABLE
            yields = self._targets(node, ctx)
            if yields:
                self.functions[ctx.function].setdefault("yields", []).extend(yields)
        for call, ctx in self.returns:
            _, resolved = self.call_name(call, ctx)
            if resolved is None:
                func = call.func
                if isinstance(func, ast.Subscript) or (isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute)
                                                       and func.func.attr == "get"):
                    made_here = self._targets(func, ctx)  # return TABLE[key](...): a factory of the table's classes
                    if made_here:
                        self.functions[ctx.function].setdefault("makes", []).extend(made_here)
                elif isinstance(func, ast.Attribute) and func.attr == "get":  # return TABLE.get(key)
                    yields = self._targets(call, ctx)
                    if yields:
                        self.functions[ctx.function].setdefault("yields", []).extend(yields)
                continue
            info = self.functions[ctx.function]
            info.setdefault("makes", []).append(resolved)  # what it returns: a factory's class
            params = self.params.get(ctx.function, ())
            # a function returning a loader's result on its own argument is a loader
            if any(isinstance(a, ast.Name) and a.id in params for a in call.args):
                info.setdefault("returns", []).append(resolved)
        if MAIN_BLOCK in self.functions:
            entries.append({"kind": "main", "target": f"{self.module}.{MAIN_BLOCK}",
                            "line": self.functions[MAIN_BLOCK]["line"]})
        elif self.module.rpartition(".")[2].partition("#")[0] == "__main__" or (self._top and self.script):
            # `python -m pkg` runs __main__.py's body; `python script.py` a script's
            entries.append({"kind": "main", "target": f"{self.module}.{MODULE_BODY}", "line": 1})
        hooks = []
        for value in self.hooks:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                hooks.append(value.value)
            else:
                hook = self.resolve(dotted(value), _Ctx(MODULE_BODY, None, ()))
                if hook:
                    hooks.append(hook)
        suppress: dict[int, list[str]] = {}
        for number, text in enumerate(self.lines if self._suppresses else (), 1):
            if "detaudit" in text:
                match = _SUPPRESS.search(text)
                if match:
                    rules_text = match.group(1)
                    suppress[number] = [r.strip() for r in rules_text.split(",") if r.strip()] if rules_text else ["*"]
        strings = [[text, attr] for text in sorted(self.strings) for attr in sorted(self.string_attrs.get(text) or {""})]
        tables = {}  # module-level dicts of functions or classes: NAME -> what each value names
        for (scope, name), values in self.values.items():
            if scope == MODULE_BODY:
                names = [t for v in values if isinstance(v, ast.Dict) for item in v.values if item is not None
                         for t in self._targets(item, _Ctx(MODULE_BODY, None, ()), 4)]
                if names:
                    tables[name] = names
        # module-level dicts of dotted-path strings: NAME -> the strings (a loader's argument
        # ``import_module(MODULES[key])`` picks one of them)
        string_tables = {}
        for (scope, name), values in self.values.items():
            if scope == MODULE_BODY:
                texts = sorted({t for v in values if isinstance(v, ast.Dict) for item in v.values
                                if isinstance(item, ast.Constant) and (t := _dotted_string(item.value)) is not None})
                if texts:
                    string_tables[name] = texts
        return {
            "version": FACTS_VERSION,
            "module": self.module,
            "imports": self.imports,
            "functions": {f"{self.module}.{q}": v for q, v in self.functions.items()},
            "classes": {f"{self.module}.{q}": {**v, "methods": [f"{self.module}.{m}" for m in v["methods"]]}
                        for q, v in self.classes.items()},
            "draws": draws,
            "entries": entries,
            "fixtures": self.fixtures,
            "hooks": hooks,
            "suppress": suppress,
            "strings": strings,
            "tables": tables,
            "string_tables": string_tables,
            "binds": self._bind_facts(),
            "names": sorted(self.names),
            "imported": sorted(self.imported),
            "dynamic": sorted(dynamic),
            "string_names": sorted(self.string_names),
            "local_uses": {name: sorted(users) for name, users in sorted(self.local_uses.items())},
            "script_strings": sorted(self.script_strings),
            "lookups": sorted(self.lookups),
            "registrars": {f"{self.module}.{q}": table for q, table in sorted(self.registrars.items())},
        }

    def _bind_facts(self) -> list[list[Any]]:
        """[key, what the call denotes, its code, what its first argument names] for each bound call
        result that a call of this file uses (a loaded function, an object whose methods are called).

        The argument: "=pkg.mod.fn" for a dotted-string constant, else the last name of an
        attribute chain or a name ("expand_path" for ``args.expand_path``), else ''.
        """
        binds: list[list[Any]] = []
        called = {c for f in self.functions.values() for c in f["calls"]}
        owners = {c.rpartition(".")[0] for c in called}
        heads = {c.partition(LOCAL)[2].split(".")[0] for c in called if LOCAL in c}
        seen: set[tuple[str, int]] = set()
        for key, call, ctx in self.binds:
            name = key.partition(LOCAL)[2] if LOCAL in key else key[len(self.module) + 1 :]
            is_attr = LOCAL not in key and "@" not in key and name.partition(".")[0] in self.classes
            if key not in called and key not in owners and "@" not in key and name not in heads and not is_attr:
                continue
            if (key, id(call)) in seen:
                continue
            seen.add((key, id(call)))
            _, resolved = self.call_name(call, ctx) if not isinstance(call.func, ast.Call) else (None, None)
            if resolved is None:
                continue
            binds.append([key, resolved, self._source_of(call), self._loader_argument(call, ctx), call.lineno])
        for key, cls_name in dict.fromkeys(self.typed):  # an annotation: an object of that class
            name = key.partition(LOCAL)[2] if LOCAL in key else key[len(self.module) + 1 :]
            if key in called or key in owners or name in heads:
                binds.append([key, cls_name, f"(annotated {cls_name.rpartition('.')[2]})", "", 0])
        return binds

    def _loader_argument(self, call: ast.Call, ctx: _Ctx) -> str:
        """What a loader call's first argument names (see _argument_name), or, for a lookup in a
        dict (``MODULES[key]``, ``MODULES.get(key)``) of this module or one it imports,
        ``[pkg.mod.MODULES``: the loader gets one of that dict's values."""
        arg = call.args[0] if call.args else None
        table = arg.value if isinstance(arg, ast.Subscript) and not (
            isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str)) else (
            arg.func.value if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
            and arg.func.attr == "get" else None)
        if table is not None:
            qualified = self.resolve(dotted(table), ctx)
            if qualified is None and isinstance(table, ast.Name) and (MODULE_BODY, table.id) in self.values \
                    and (ctx.function, table.id) not in self.values:
                qualified = f"{self.module}.{table.id}"
            if qualified is not None:
                return "[" + qualified
        return _argument_name(call)

    def _listed_owner(self, listed: ast.expr | None, ctx: _Ctx) -> str | None:
        """What a listing of attributes (``vars(x)``, ``x.__dict__``, ``getmembers(x)``) can reach, as
        a qualified module or class ('' any module: ``sys.modules[name]``), or None: locals, or an
        object the file cannot place (``vars(args)``: a namespace, not code of the tree)."""
        if listed is None:
            return self.module if ctx.function in (MODULE_BODY, MAIN_BLOCK) else None
        if isinstance(listed, ast.Subscript) and dotted(listed.value) == "sys.modules" and \
                self.resolve("sys", ctx) == "sys":
            index = listed.slice
            return self.module if isinstance(index, ast.Name) and index.id == "__name__" else ""
        written = dotted(listed)
        if written in ("self", "cls") and ctx.cls:
            return f"{self.module}.{ctx.cls}"
        return self.resolve(written, ctx)

    def _built_name(self, node: ast.expr, ctx: _Ctx) -> str:
        """A regex of the attribute names ``getattr(x, node)`` can look up, when the code builds the
        name at run time: ``f"w13_{x}"`` -> ``w13_.*``; in a function that lists an object's
        attributes (``dir(x)``, ``vars(x)``, ``__dict__``, ``inspect.getmembers``): ``.*``. '' for
        a constant, or a value taken from elsewhere (a variable, a parameter, ``cfg.method``): it is
        one of the tree's strings (which count as names themselves) or of its config files, the
        over-approximation dynamic dispatch makes too."""
        if isinstance(node, ast.Constant):
            return ""
        return _name_regex(node) or (".*" if ctx.function in self.reflecting else "")

    def _mode_call(self, receiver: ast.expr, attr: str, call: ast.Call, ctx: _Ctx, function: dict[str, Any]) -> None:
        """``model.eval()``, ``self.model.train()``: [the receiver's bind key, "eval" or "train"] in the
        function's "modes" (modes.py). ``train(False)`` is ``eval()``; ``X(...).eval()`` assigned to a
        name puts that name's object in eval mode; a receiver with no key (``self``, a call's result)
        is kept as '' (an unknown object)."""
        mode = attr
        if attr == "train" and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False:
            mode = "eval"
        key = ""
        if isinstance(receiver, ast.Name) and receiver.id == "self" and ctx.cls is not None:
            key = f"{self.module}.{ctx.cls}"  # the class's own instances (a module putting itself in a mode)
        elif isinstance(receiver, (ast.Name, ast.Attribute)):
            key = self._bind_key(receiver, ctx) or ""
        elif isinstance(receiver, ast.Call) and mode == "eval":
            stmt = self._stmt  # model = Cls(...).eval(): the bound name is in eval mode
            if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1:
                key = self._bind_key(stmt.targets[0], ctx) or ""
        function.setdefault("modes", []).append([key, mode])

    def _mode_class(self, rule: Rule, site: CallSite, ctx: _Ctx) -> str:
        """The class whose instances' training mode decides whether a draw happens: the module an
        ``nn.Dropout`` is built in (a submodule), the module a ``F.dropout(..., training=self.training)``
        or a draw under ``if self.training:`` runs in; '' for others."""
        if ctx.cls is None:
            return ""
        owner = f"{self.module}.{ctx.cls}"
        if rule.callees & {"torch.nn.Dropout"} and site.last[:1].isupper():
            return owner  # self.drop = nn.Dropout(p): a submodule of the class being built
        training = site.argument("training", 2) if site.last[:1].islower() and "dropout" in site.last else None
        if training is not None and dotted(training) == "self.training":
            return owner
        if any(taken and dotted(test) == "self.training" for test, taken in ctx.guards):
            return owner
        return ""

    def _object_kind(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> str:
        """The kind of object (rules.OBJECT_KINDS) a name or ``self.x`` is bound to in this file, or ''.
        A diffusers pipeline: made by a diffusers ``*Pipeline`` class, its ``from_pretrained``, or a
        class of this file that derives from one; ``.to(...)``, ``.cuda()`` of one is one."""
        if depth > 3 or (type(node) is ast.Attribute and not (
                isinstance(node.value, ast.Name) and node.value.id == "self")):
            return ""
        for value in self._values_of(node, ctx):
            kind = self._made_kind(value, ctx, depth)
            if kind:
                return kind
        return ""

    def _made_kind(self, value: ast.expr, ctx: _Ctx, depth: int) -> str:
        """The kind of object an expression makes: ``FluxPipeline.from_pretrained(p)``, ``.to("cuda")``
        of one, or a name bound to one (see _object_kind)."""
        if not isinstance(value, ast.Call) or depth > 3:
            return ""
        made = self.resolve(dotted(value.func), ctx) or ""
        if (made.startswith("diffusers.") and _PIPELINE_CLASS.search(made)) or self._derives_from_pipeline(made):
            return DIFFUSERS_PIPELINE
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _SAME_OBJECT:  # X.to("cuda") is X
            if isinstance(func.value, ast.Call):
                return self._made_kind(func.value, ctx, depth + 1)
            if isinstance(func.value, (ast.Name, ast.Attribute)):
                return self._object_kind(func.value, ctx, depth + 1)
        return ""

    def _derives_from_pipeline(self, made: str) -> bool:
        """``made`` (a qualified name) is, or is a method of, a class of this file that derives from a
        diffusers pipeline class."""
        local = made[len(self.module) + 1:] if made.startswith(self.module + ".") else ""
        cls = self.classes.get(local) or self.classes.get(local.rpartition(".")[0])
        return cls is not None and any(b.startswith("diffusers.") and _PIPELINE_CLASS.search(b) for b in cls["bases"])

    def _pool_kind(self, receiver: ast.expr, ctx: _Ctx) -> str:
        """"process" when ``receiver`` is a process pool (``Pool(4)``, ``ProcessPoolExecutor()``, a
        context's ``ctx.Pool()``, or a name or ``self.x`` assigned one, ``with ... as`` too),
        "thread" for a thread pool, else ''."""
        for value in [receiver] if isinstance(receiver, ast.Call) else self._values_of(receiver, ctx):
            if not isinstance(value, ast.Call):
                continue
            made = self.resolve(dotted(value.func), ctx) or ""
            if made in E.PROCESS_POOLS or (isinstance(value.func, ast.Attribute) and value.func.attr == "Pool"
                                           and made not in E.THREAD_POOLS):
                return "process"
            if made in E.THREAD_POOLS:
                return "thread"
        return ""

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

    def _rules(self, resolved: str | None, attr: str | None) -> tuple[Rule, ...]:
        by_callee = RULES_BY_CALLEE.get(resolved, ()) if resolved is not None else ()
        by_method = RULES_BY_METHOD.get(attr, ()) if attr is not None else ()
        if not by_method:
            return by_callee
        return by_callee + tuple(r for r in by_method if r not in by_callee)

    def _site(self, call: ast.Call, resolved: str | None, attr: str | None, ctx: _Ctx,
              function: dict[str, Any]) -> CallSite:
        return CallSite(call, resolved, attr, lambda node: self.entropy_of(node, ctx), function.get("none_params", {}))

    def _source_of(self, node: ast.expr) -> str:
        """The node's code as written (its first line when it spans several), at most 120 characters."""
        line = self.lines[node.lineno - 1] if 0 < node.lineno <= len(self.lines) else ""
        end = node.end_col_offset if node.end_lineno == node.lineno else None
        text = line.encode("utf-8")[node.col_offset:end].decode("utf-8", "replace").strip()
        if end is None:
            text += " ..."
        return text if len(text) <= 120 else text[:117] + "..."

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

    def _guard_condition(self, ctx: _Ctx) -> tuple[C.Expr, bool]:
        """The `if` conditions around code as one condition over its function's parameters, and
        whether it uses one (else its value is the same at every call)."""
        known = self._guard_conditions.get(id(ctx))
        if known is None:  # every call under one `if` shares its ctx (kept alive by _shared_guards and calls)
            parts = [e if taken else ["not", e] for e, taken in
                     ((self._condition(test, ctx), taken) for test, taken in ctx.guards)]
            guard = parts[0] if len(parts) == 1 else ["and", *parts]
            known = self._guard_conditions[id(ctx)] = (guard, C.uses_param(guard))
        return known

    def _switched_by_params(self, ctx: _Ctx) -> C.Expr | None:
        """For a draw under `if` conditions on its function's parameters: the condition, with the
        function's parameters and their constant defaults written into its facts (so that the
        analysis can tell which calls switch the draw off); else None."""
        if not ctx.guards or ctx.function in (MODULE_BODY, MAIN_BLOCK) or self._no_names:
            return None
        condition, uses = self._guard_condition(ctx)
        if not uses:
            return None
        function = self.functions[ctx.function]
        if "params" not in function:
            params = self._positional.get(ctx.function, [])
            function["params"] = params[1:] if function.get("cls") and params[:1] in (["self"], ["cls"]) else params
        node = self._scopes.get(ctx.function)
        defaults: dict[str, C.Expr] = {}  # parameter -> its constant default
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = (*node.args.posonlyargs, *node.args.args)
            pairs = [*zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults, strict=True),
                     *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)]
            for arg, default in pairs:
                flag = self._passed(default, ctx) if type(default) is ast.Constant else None
                if flag is not None:
                    defaults[arg.arg] = flag
        function["defaults"] = defaults
        return condition

    def _seed_condition(self, call: ast.Call, ctx: _Ctx, function: dict[str, Any], index: int,
                        flag: C.Expr | None) -> None:
        """What seeding through the ``index``-th call depends on: the `if` conditions around it and
        a seeding flag it passes (as conditions over the function's parameters: "seed_conds"), and
        the constants and parameter-derived values it passes on ("call_args": position or keyword
        -> condition), so that a caller's constants reach the callee's conditions."""
        if not (call.args or call.keywords or ctx.guards or flag):
            return
        condition: C.Expr | None = None
        uses = False
        if ctx.guards:
            condition, uses = self._guard_condition(ctx)
        if flag is not None:
            condition = flag if condition is None else ["and", condition, flag]
            uses = C.uses_param(condition)
        forwards = False
        if condition is not None and uses:
            function.setdefault("seed_conds", {})[index] = condition
            forwards = True
        passed: dict[int | str, C.Expr] = {}
        for position, arg in enumerate(call.args):
            expr = self._passed(arg, ctx)
            if expr is not None:
                passed[position] = expr
        for keyword in call.keywords:
            if keyword.arg:
                expr = self._passed(keyword.value, ctx)
                if expr is not None:
                    passed[keyword.arg] = expr
        if passed:
            function.setdefault("call_args", {})[index] = passed
            forwards = forwards or any(C.uses_param(e) for e in passed.values())
        if forwards and "params" not in function:
            params = self._positional.get(ctx.function, [])
            function["params"] = params[1:] if function.get("cls") and params[:1] in (["self"], ["cls"]) else params

    def _passed(self, arg: ast.expr, ctx: _Ctx) -> C.Expr | None:
        """An argument worth carrying into the callee: a flag-like constant (a bool, None, a short
        string without spaces: a role, a mode) or a value that comes from the caller's parameters."""
        kind = type(arg)
        if kind is ast.Constant:
            value = arg.value  # type: ignore[attr-defined]
            if value is None or type(value) is bool or (type(value) is str and len(value) <= MAX_FLAG_STRING
                                                         and " " not in value):
                return ["c", value]
            return None
        if kind is ast.Name:  # the commonest argument: a parameter, or a local that may hold one
            is_param, value_of = self._readers.get(ctx.function) or self._make_readers(ctx.function)
            name = arg.id  # type: ignore[attr-defined]
            if is_param(name):
                return C.param(name)
            if value_of(name) is None:
                return None  # neither a parameter nor a local assigned once: nothing to carry
        elif kind not in _CONDITION_NODES:
            return None
        expr = self._condition(arg, ctx)
        return expr if C.uses_param(expr) else None

    def _guard_texts(self, ctx: _Ctx) -> list[str]:
        """The `if` conditions around code, as source text ("not (...)" for an else branch)."""
        guards = []
        for test, taken in ctx.guards:
            # Every call under one `if` shares its test: unparse each test once (the tree outlives this).
            text = self._unparsed.get(id(test))
            if text is None:
                text = ast.unparse(test)
                if len(text) > 100:
                    text = text[:97] + "..."
                self._unparsed[id(test)] = text
            guards.append(text if taken else f"not ({text})")
        return guards

    def _draw(self, rule: Rule, message: str, site: CallSite, ctx: _Ctx, stmt: ast.stmt | None,
              made: list[tuple[tuple[int, ...], int, tuple[str, ...]]]) -> dict[str, Any]:
        call = site.node
        line = call.lineno
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        param = site.generator_param(rule.generator_index(site)) if rule.guardable else ""
        # Calls made before the draw, in its function, that run whenever it runs (not in a branch,
        # loop or try body that the draw is outside of): seeding there covers the draw.
        depth = len(ctx.block)
        before = [(index, families) for block, index, families in made
                  if len(block) <= depth and ctx.block[: len(block)] == block]
        seeded_here = sorted({f for _, families in before for f in families})

        def resolve(node: ast.expr) -> str:
            written = dotted(node)
            return self.resolve(written, ctx) or written or ""

        scope = self._walked.get(ctx.function)
        if scope is None and ctx.function in self._scopes:
            scope = self._walked[ctx.function] = Scope(self._scopes[ctx.function])
        inert, by_name = impact(call, stmt, ctx.function, resolve, scope)
        draw = {"rule": rule.code, "message": message, "line": line, "end_line": call.end_lineno or line,
                "col": call.col_offset + 1, "function": f"{self.module}.{ctx.function}",
                "guards": self._guard_texts(ctx), "code": code, "param": param, "impact": inert}
        if by_name:
            draw["impact_by_name"] = by_name
        if before:
            draw["before"] = [index for index, _ in before]
        if seeded_here:
            draw["seeded_here"] = seeded_here
        if rule.library:
            draw["callee"] = site.name or ""
        switch = self._switched_by_params(ctx)
        if switch is not None:
            draw["switch"] = switch
        if rule.family == "torch":
            mode_class = self._mode_class(rule, site, ctx)
            if mode_class:
                draw["mode_class"] = mode_class
        return draw

    def _entry(self, call: ast.Call, resolved: str | None, ctx: _Ctx) -> list[dict[str, Any]]:
        target: ast.expr | None = None
        kind = ""
        func = call.func
        if resolved == E.RAY_REMOTE and call.args and not call.keywords:
            target, kind = call.args[0], "ray"
        elif isinstance(func, ast.Call) and self.resolve(dotted(func.func), ctx) == E.RAY_REMOTE and call.args:
            target, kind = call.args[0], "ray"  # ray.remote(num_gpus=1)(Cls)
        elif resolved is not None and resolved.endswith(".Process") and resolved.startswith(E.MP_MODULES):
            target = next((k.value for k in call.keywords if k.arg == "target"), None)
            kind = "multiprocessing"
        elif resolved in E.MP_SPAWN and call.args:
            target, kind = call.args[0], "multiprocessing"
        elif resolved in E.RUNNERS:
            target = call.args[0] if call.args else next((k.value for k in call.keywords), None)
            kind = "cli"
            if target is None and resolved == "fire.Fire":  # fire.Fire(): every function of the module
                return [{"kind": kind, "target": f"{self.module}.{name}", "line": call.lineno}
                        for name in sorted(self.top_level) if name in self.functions]
        else:
            target = next((k.value for k in call.keywords if k.arg == "worker_init_fn"), None)
            kind = "worker-init"
        if target is None:
            return []
        return [{"kind": kind, "target": qualified, "line": call.lineno} for qualified in self._targets(target, ctx)]


def _option_attr(call: ast.Call, keyword: str) -> str:
    """The attribute a keyword's value ends up in: ``add_argument("--expand-path", default=...)``
    sets ``args.expand_path`` (or its ``dest=``); any other keyword names itself."""
    func = call.func
    if keyword == "default" and isinstance(func, ast.Attribute) and func.attr == "add_argument":
        for k in call.keywords:
            if k.arg == "dest" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                return k.value.value
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        long = [o for o in options if o.startswith("--")] or options
        if long:
            return long[0].lstrip("-").replace("-", "_")
    return keyword


# Argument expressions that can be a constant or come from a parameter (see conditions.encode).
_CONDITION_NODES = frozenset({ast.Name, ast.UnaryOp, ast.BoolOp, ast.Compare})
MAX_FLAG_STRING = 64  # longer string arguments (messages, paths) are no flags: not carried


def _argument_name(call: ast.Call) -> str:
    """What a loader call's first argument names: '=dotted.string', 'attr' of ``x.attr``, 'name', or ''."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords), None)
    if arg is None:
        return ""
    if isinstance(arg, ast.Constant):
        text = _dotted_string(arg.value)
        return f"={text}" if text else ""
    if isinstance(arg, ast.Attribute):
        return arg.attr
    if isinstance(arg, ast.Name):
        return arg.id
    if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str):
        return arg.slice.value  # cfg["expand_path"]
    return ""


def _none_params(args: ast.arguments, is_method: bool) -> dict[str, int]:
    """Parameters that default to None -> positional index (self/cls not counted; -1: keyword-only)."""
    positional = args.posonlyargs + args.args
    if is_method and positional:
        positional = positional[1:]
    out: dict[str, int] = {}
    defaults = args.defaults
    for i, (arg, default) in enumerate(zip(positional[len(positional) - len(defaults):], defaults, strict=False)):
        if isinstance(default, ast.Constant) and default.value is None:
            out[arg.arg] = len(positional) - len(defaults) + i
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
        if isinstance(kw_default, ast.Constant) and kw_default.value is None:
            out[arg.arg] = -1
    return out


def _call_site(call: ast.Call, none_params: dict[str, int]) -> tuple[int, int, tuple[str, ...]]:
    """A call's details as stored: (line, positional count, keywords passed a value other than None).

    A ``generator=None`` guard needs these to tell call sites that pass a generator from those that don't.
    """
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    passed = []
    for k in call.keywords:
        if k.arg is None:
            passed.append("**")  # **kwargs: any parameter may be given
            continue
        if isinstance(k.value, ast.Constant) and k.value.value is None:
            continue
        # forwarding our own None-default parameter: "kw<param" (passes only if our caller passes)
        passed.append(f"{k.arg}<{k.value.id}" if isinstance(k.value, ast.Name) and k.value.id in none_params else k.arg)
    return (call.lineno, 99 if starred else len(call.args), tuple(passed))


def _name_regex(node: ast.expr, depth: int = 0) -> str:
    """A regex of the strings an f-string or a ``+`` / ``%`` / ``.format`` of string constants and
    values can make (a value: ``.*``); '' when the expression is none of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if depth > 8:
        return ""
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) and isinstance(v.value, str) else ".*"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_name_regex(node.left, depth + 1) or ".*") + (_name_regex(node.right, depth + 1) or ".*")
    template = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template, holes = node.left, r"%[^a-zA-Z%]*[a-zA-Z%]"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        template, holes = node.func.value, r"\{[^{}]*\}"
    if isinstance(template, ast.Constant) and isinstance(template.value, str):
        return ".*".join(re.escape(part) for part in re.split(holes, template.value))
    return ""


def _unsubscripted(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


def _is_main_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [test.left, test.comparators[0]]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        return bool(names and consts)
    return False


def file_facts(module: str, source: str, is_package: bool = False, name: str | None = None) -> dict[str, Any]:
    """Parse ``source`` (raises SyntaxError) and return its facts (``name``: its dotted import
    name when ``module``, the key its functions are stored under, differs)."""
    tree = ast.parse(source)
    walker = FileFacts(module, source, is_package, name)
    try:
        return walker.run(tree).facts()
    finally:
        # The walker refers to itself (its handler table holds its bound methods) and holds the
        # tree: cleared, both are freed now by reference counting. Left to the cyclic collector,
        # which the scan turns off, every file's tree lived to the scan's end and one collection
        # then walked them all (a quarter of a large tree's scan time).
        walker.__dict__.clear()
