"""The walk of one file (``facts.FileFacts``, the traversal layer): it dispatches on each statement's
node type and collects what the other layers read: definitions, imports, assignments (names,
``self.x``, registrations), returns, the calls with the `if` conditions and blocks around them,
and what the code names (attributes, identifier strings, command lines, dotted paths)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from typing import Any, Self

from detaudit.scan import entries as E
from detaudit.scan.facts_base import (
    _CHILD_FIELDS,
    MAIN_BLOCK,
    MODULE_BODY,
    _child_fields,
    _Ctx,
    _dotted_string,
    _unsubscripted,
    dotted,
)
from detaudit.scan.facts_calls import _none_params, _option_attr
from detaudit.scan.facts_draws import FactsDraws
from detaudit.scan.schema import LOCAL

# Statements after which the rest of their block never runs.
# Statements after which the rest of their block never runs.
_ENDS_BLOCK = frozenset({ast.Raise, ast.Return, ast.Break, ast.Continue})

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


# A longer string naming a .py file or holding "-m" is data; a docstring's "Usage: python -m pkg.train"
# is a launch like a README's.
MAX_SCRIPT_STRING = 64 * 1024

# The commonest expression nodes, as module globals (one lookup less per node than ``ast.X``).
_NAME, _ATTRIBUTE, _CALL, _CONSTANT, _KEYWORD = ast.Name, ast.Attribute, ast.Call, ast.Constant, ast.keyword

_CONSOLE_SCRIPT = re.compile(r"\s*[A-Za-z0-9_.-]+\s*=\s*([A-Za-z_][A-Za-z0-9_.]*)\s*:\s*[A-Za-z_][A-Za-z0-9_.]*\s*(?:\[.*\])?\s*")


class FactsWalk(FactsDraws):
    """The traversal layer of a file's walk (see the module doc)."""

    def __init__(self, module: str, source: str, is_package: bool = False, name: str | None = None) -> None:
        super().__init__(module, source, is_package, name)
        self._handlers: dict[type[ast.AST], Callable[[Any, _Ctx], None]] = {
            ast.FunctionDef: self._def, ast.AsyncFunctionDef: self._def, ast.ClassDef: self._class,
            ast.If: self._if, ast.For: self._loop, ast.AsyncFor: self._loop, ast.While: self._loop,
            ast.Try: self._try, ast.TryStar: self._try, ast.Match: self._match,
            ast.Import: self._import, ast.ImportFrom: self._import_from,
            ast.Assign: self._assign, ast.AnnAssign: self._ann_assign, ast.Return: self._return,
            ast.With: self._with, ast.AsyncWith: self._with,
        }

    def run(self, tree: ast.Module) -> Self:
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
        roots: list[ast.AST] = []  # expressions, walked in one exprs_all call (each root on its own, in order)
        for name in _CHILD_FIELDS.get(kind) or _child_fields(kind):
            value = getattr(node, name, None)
            if type(value) is list:
                if value and isinstance(value[0], ast.stmt):
                    if roots:
                        self.exprs_all(roots, ctx)
                        roots = []
                    self.body(value, ctx)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            roots.append(item)
            elif isinstance(value, ast.AST):
                roots.append(value)
        if roots:
            self.exprs_all(roots, ctx)

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
        self.exprs_all((node,), ctx)

    def exprs_all(self, roots: Sequence[ast.AST], ctx: _Ctx) -> None:
        """Walk each of ``roots`` in turn (a statement's expressions, in field order)."""
        # Each breadth-first, in ast.walk's order (call order decides which dispatch path a finding
        # names), but without its generators and without visiting leaves: ~3x faster.
        stmt = self._stmt
        names, own, every, strings = self.names, self.top_level, self.star_import, self.string_names
        uses, scripts = self.local_uses, self.script_strings
        if self._no_names:  # test code: what it names never counts (what it launches does: an e2e test's run)
            names, own, every, strings = set(), set(), False, set()
        # The commonest nodes' children are pushed directly (in their _fields order, as the generic
        # loop at the end would): this loop sees every expression node of the file.
        calls = self.calls
        for root in roots:
            todo: list[Any] = [root]  # Any: each node's type is told by `kind is X`, not by isinstance (~5 % of the walk)
            for sub in todo:  # the list grows while it is read: that is the queue
                kind = type(sub)
                if kind is _NAME:
                    if every:  # a star import: every bare name may be one of another module's defs
                        names.add(sub.id)
                    elif sub.id in own:  # a use of one of its own top-level defs
                        known = uses.get(sub.id)
                        if known is None:
                            uses[sub.id] = {ctx.function}
                        else:
                            known.add(ctx.function)
                    continue
                if kind is _CONSTANT:
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
                if kind is _ATTRIBUTE:
                    names.add(sub.attr)
                    if sub.attr == "__dict__":
                        self.reflecting.add(ctx.function)
                        self._listed.append((sub.value, ctx))  # x.__dict__[name]: any attribute of x
                    todo.append(sub.value)
                    continue
                if kind is _CALL:
                    calls.append((sub, ctx, stmt))
                    # an identifier string passed to a call: the callee may look it up (getattr(actor, "m"),
                    # group.run_all("m"), group.run_all(method="m"))
                    flagged = False  # a "-m" among the arguments: session.run("python", "-m", "train")
                    args = sub.args
                    for arg in args:
                        if type(arg) is _CONSTANT and type(arg.value) is str:
                            if arg.value.isidentifier():
                                names.add(arg.value)
                            elif arg.value in _MODULE_FLAGS:
                                flagged = True
                    if flagged:
                        scripts.update(_module_flags(args))
                    elif args and type(sub.func) is _ATTRIBUTE and sub.func.attr == "run_module":
                        scripts.update(_module_flags([ast.Constant("-m"), args[0]]))  # runpy.run_module("train")
                    for kw in sub.keywords:
                        given = kw.value
                        if type(given) is _CONSTANT:
                            if type(given.value) is str and given.value.isidentifier():
                                names.add(given.value)
                            if kw.arg:
                                text = _dotted_string(given.value)
                                if text is not None:
                                    self.string_attrs.setdefault(text, set()).add(_option_attr(sub, kw.arg))
                    todo.append(sub.func)
                    todo.extend(args)
                    todo.extend(sub.keywords)
                    continue
                if kind is _KEYWORD:
                    todo.append(sub.value)
                    continue
                if kind is ast.List or kind is ast.Tuple:
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


def _is_main_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [test.left, test.comparators[0]]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        return bool(names and consts)
    return False
