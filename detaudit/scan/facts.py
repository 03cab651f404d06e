"""Per-file facts for scan-rng, from Python's ``ast`` (the scanned code is never imported or run).

A file's facts are plain data (dicts, lists, strings), so they can be cached by content:
its functions and the calls each makes (names resolved through imports and aliases),
the seeds each makes, the global-RNG draws with their guard conditions, the process entry
points it declares (Ray actors and tasks, ``__main__`` blocks, multiprocessing targets,
DataLoader ``worker_init_fn``), Ray worker setup hooks, and suppression comments.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from detaudit.scan.rules import (
    BUILTIN_LOADERS,
    CALLING_LOADERS,
    ENTROPY_CALLS,
    NUMPY_LEGACY,
    PASS_THROUGH_CALLS,
    SEED_CALLS,
    SEED_TAKERS,
    SINK_CALLS,
    SINK_WORDS,
    STDLIB_DRAWS,
    TORCH_DRAWS,
    TORCH_DROPOUT,
    TORCH_INIT,
    TORCH_INPLACE,
)

FACTS_VERSION = 6
MODULE_BODY = "<module>"
MAIN_BLOCK = "<main>"
_BUILTINS = frozenset({"id", "hash"})
# Fields that never hold a call, a string or a dict (contexts, operators, identifiers, flags):
# the walks skip them.
_LEAF_FIELDS = frozenset({"ctx", "op", "ops", "id", "arg", "attr", "kind", "conversion", "type_comment", "level",
                          "module", "is_async", "simple", "names", "name", "asname"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> its other fields, in _fields order


def _child_fields(kind: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)  # type: ignore[attr-defined]
    return fields
# A string literal that names a module attribute by dotted path ("pkg.mod.fn" or "pkg.mod:fn").
DOTTED_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")
LOCAL = ".<local>."  # key part of a function-local name: "mod.f.<local>.fn"
SUPER = ".<super>."  # "mod.Cls.<super>.m": super().m() inside Cls
_SUPPRESS = re.compile(r"#\s*detaudit:\s*ignore(?:\[([A-Za-z0-9_,\s]+)\])?")
_NUMPY_UNSEEDED = frozenset({
    "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.PCG64", "numpy.random.PCG64DXSM",
    "numpy.random.SeedSequence", "numpy.random.MT19937", "numpy.random.Philox", "numpy.random.SFC64",
})
# The last part of every callee name or attribute that _draw_rules_plain can report.
_DRAW_NAMES = (TORCH_DRAWS | TORCH_INIT | TORCH_INPLACE | NUMPY_LEGACY | STDLIB_DRAWS | {"manual_seed", "seed"}
               | {n.rpartition(".")[2] for n in TORCH_DROPOUT | _NUMPY_UNSEEDED | SEED_TAKERS}
               | {"Random", "SystemRandom"})
_ENTRY_NAMES = frozenset({"remote", "spawn", "start_processes"})
_MP_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})


@dataclass(frozen=True)
class _Ctx:
    function: str  # local qualname: "f", "Cls.m", "<module>", "<main>"
    cls: str | None
    guards: tuple[tuple[ast.expr, bool], ...]  # (condition, taken) pairs around the code
    locals: tuple[tuple[str, str], ...] = ()  # nested defs visible by name -> local qualname


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


class FileFacts:
    """Walks one module; ``facts()`` returns its plain-data facts."""

    def __init__(self, module: str, source: str, is_package: bool = False) -> None:
        self.module = module
        self.params: dict[str, set[str]] = {}
        self.bound: set[str] = set()
        self.package = module if is_package else module.rpartition(".")[0]
        self.lines = source.splitlines()
        self.imports: dict[str, str] = {}
        self.top_level: set[str] = set()
        self.functions: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[ast.Call, _Ctx]] = []
        self.decorated: list[tuple[str, str, int]] = []  # (kind, local qualname, line)
        self.hooks: list[ast.expr] = []
        self.strings: set[str] = set()
        self.binds: list[tuple[str, ast.Call, _Ctx]] = []  # (key, the call whose result is bound, ctx)
        self.returns: list[tuple[ast.Call, _Ctx]] = []
        self.loaders: set[str] = set()  # local qualnames of functions that load by dotted path
        self.stmt_of: dict[int, ast.stmt] = {}  # id(call) -> its statement (for impact)
        self._unparsed: dict[int, str] = {}  # id(an if's test) -> its text
        self._shared_guards: dict[int, tuple[_Ctx, list[str]]] = {}  # id(ctx) -> (ctx, its guard texts)
        self._stmt: ast.stmt | None = None
        self._function(MODULE_BODY, None, 0)

    # -- walking -------------------------------------------------------------------------

    def _function(self, qual: str, cls: str | None, line: int) -> None:
        # "sites": (line, positional count, keywords) of each call in "calls", for generator=None guards
        self.functions.setdefault(qual, {"line": line, "calls": [], "sites": [], "seeds": [], "cls": cls})

    def run(self, tree: ast.Module) -> "FileFacts":
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.top_level.add(node.name)
        self.body(tree.body, _Ctx(MODULE_BODY, None, ()))
        return self

    def body(self, stmts: list[ast.stmt], ctx: _Ctx) -> None:
        nested = {s.name for s in stmts if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if nested and ctx.function not in (MODULE_BODY, MAIN_BLOCK) and ctx.cls != ctx.function:
            prefix = ctx.function
            ctx = _Ctx(ctx.function, ctx.cls, ctx.guards, ctx.locals + tuple((n, f"{prefix}.{n}") for n in nested))
        for stmt in stmts:
            self.stmt(stmt, ctx)

    def stmt(self, node: ast.stmt, ctx: _Ctx) -> None:
        kind = type(node)
        self._stmt = node
        if kind is ast.Assign or kind is ast.AnnAssign:
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, ast.Call):
                targets = node.targets if kind is ast.Assign else [node.target]  # type: ignore[attr-defined]
                for target in targets:
                    key = self._bind_key(target, ctx)
                    if key is not None:
                        self.binds.append((key, value, ctx))
        elif kind is ast.Return and isinstance(node.value, ast.Call):  # type: ignore[attr-defined]
            self.returns.append((node.value, ctx))  # type: ignore[attr-defined]
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            self._def(node, ctx)  # type: ignore[arg-type]
        elif kind is ast.ClassDef:
            self._class(node, ctx)  # type: ignore[arg-type]
        elif kind is ast.If:
            test = node.test  # type: ignore[attr-defined]
            if ctx.function == MODULE_BODY and _is_main_test(test):
                self._function(MAIN_BLOCK, None, node.lineno)
                self.body(node.body, _Ctx(MAIN_BLOCK, None, ()))  # type: ignore[attr-defined]
                self.body(node.orelse, ctx)  # type: ignore[attr-defined]
                return
            self.exprs(test, ctx)
            self.body(node.body, _Ctx(ctx.function, ctx.cls, ctx.guards + ((test, True),), ctx.locals))  # type: ignore[attr-defined]
            if node.orelse:  # type: ignore[attr-defined]
                self.body(node.orelse, _Ctx(ctx.function, ctx.cls, ctx.guards + ((test, False),), ctx.locals))  # type: ignore[attr-defined]
        elif kind is ast.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.imports.setdefault(head, head)
        elif kind is ast.ImportFrom:
            base = self._from_module(node)  # type: ignore[arg-type]
            for alias in node.names:  # type: ignore[attr-defined]
                if alias.name != "*":
                    self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
        else:
            for name in _CHILD_FIELDS.get(kind) or _child_fields(kind):
                field = getattr(node, name, None)
                if type(field) is list:
                    if field and isinstance(field[0], ast.stmt):
                        self.body(field, ctx)
                    else:
                        for item in field:
                            if isinstance(item, (ast.excepthandler, ast.match_case)):
                                if getattr(item, "type", None) is not None:
                                    self.exprs(item.type, ctx)  # type: ignore[union-attr]
                                self.body(item.body, ctx)
                            elif isinstance(item, ast.AST):
                                self.exprs(item, ctx)
                elif isinstance(field, ast.AST):
                    self.exprs(field, ctx)

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
        if ctx.cls is not None and ctx.function == ctx.cls:
            qual = f"{ctx.cls}.{node.name}"
        elif ctx.function in (MODULE_BODY, MAIN_BLOCK):
            qual = node.name
        else:
            qual = f"{ctx.function}.{node.name}"
        cls = ctx.cls if ctx.function == ctx.cls else None
        self._function(qual, cls, node.lineno)
        if cls is not None:
            self.classes[cls]["methods"].append(qual)
        none_params = _none_params(node.args, cls is not None)
        if none_params:
            self.functions[qual]["none_params"] = none_params
        self.params[qual] = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        for dec in node.decorator_list:
            self.exprs(dec, ctx)
            if _is_ray_remote(dec, self):
                self.decorated.append(("ray-task", qual, node.lineno))
        inner = _Ctx(qual, cls, (), ctx.locals)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.exprs(default, ctx)
        self.body(node.body, inner)

    def _class(self, node: ast.ClassDef, ctx: _Ctx) -> None:
        qual = node.name if ctx.function in (MODULE_BODY, MAIN_BLOCK) else f"{ctx.function}.{node.name}"
        bases = [self.resolve(dotted(b), ctx) or dotted(b) for b in node.bases]
        self.classes[qual] = {"line": node.lineno, "methods": [], "bases": [b for b in bases if b]}
        self._function(qual, None, node.lineno)  # the class body runs at import time
        for dec in node.decorator_list:
            self.exprs(dec, ctx)
            if _is_ray_remote(dec, self):
                self.decorated.append(("ray-actor", qual, node.lineno))
        self.body(node.body, _Ctx(qual, qual, (), ctx.locals))

    def exprs(self, node: ast.AST, ctx: _Ctx) -> None:
        # Breadth-first, in ast.walk's order (call order decides which dispatch path a finding
        # names), but without its generators and without visiting leaves: ~3x faster.
        todo = [node]
        for sub in todo:  # the list grows while it is read: that is the queue
            kind = type(sub)
            if kind is ast.Name:
                continue
            if kind is ast.Call:
                self.calls.append((sub, ctx))  # type: ignore[arg-type]
                if self._stmt is not None:
                    self.stmt_of[id(sub)] = self._stmt
            elif kind is ast.Constant:
                value = sub.value  # type: ignore[attr-defined]
                if type(value) is str and "." in value and len(value) < 200 and DOTTED_STRING.fullmatch(value):
                    self.strings.add(value)
                continue
            elif kind is ast.Dict:
                for key, value in zip(sub.keys, sub.values):  # type: ignore[attr-defined]
                    if isinstance(key, ast.Constant) and key.value == "worker_process_setup_hook":
                        self.hooks.append(value)
            for name in _CHILD_FIELDS.get(kind) or _child_fields(kind):
                child = getattr(sub, name, None)
                if isinstance(child, ast.AST):
                    todo.append(child)
                elif type(child) is list:
                    todo.extend(item for item in child if isinstance(item, ast.AST))

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

    # -- facts ----------------------------------------------------------------------------

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

    def facts(self) -> dict[str, Any]:
        self.bound = {key for key, _, _ in self.binds}
        draws: list[dict[str, Any]] = []
        entries: list[dict[str, Any]] = []
        loads: dict[str, set[str]] = {}  # function -> what it calls that marks a loader
        for call, ctx in self.calls:
            name, resolved = self.call_name(call, ctx)
            function = self.functions[ctx.function]
            if name == "getattr" and "getattr" not in self.imports:
                loads.setdefault(ctx.function, set()).add("getattr")
                resolved = None
            if resolved is not None:
                function["calls"].append(resolved)
                function["sites"].append(_call_site(call, function.get("none_params", {})))
                if ctx.guards:  # a call under `if`: what it reaches runs only when the condition holds
                    shared = self._shared_guards.get(id(ctx))
                    if shared is None:  # one list per `if` body (pickled once), kept with its ctx alive
                        shared = self._shared_guards[id(ctx)] = (ctx, self._guard_texts(ctx))
                    function.setdefault("guarded_calls", []).append([len(function["calls"]) - 1, shared[1], call.lineno])
                seeded = SEED_CALLS.get(resolved)
                if seeded:
                    function["seeds"].extend(f for f in seeded if f not in function["seeds"])
                if resolved in ("importlib.import_module", "getattr") or resolved in BUILTIN_LOADERS \
                        or resolved in CALLING_LOADERS:
                    loads.setdefault(ctx.function, set()).add(resolved)
            for rule, message, param in self._draw_rules(call, name, resolved, function.get("none_params", {})):
                draws.append(self._draw(rule, message, call, ctx, param))
            # every entry form needs keywords (Process(target=...), worker_init_fn=), a call of a
            # call's result (ray.remote(num_gpus=1)(Cls)), or one of these callee names
            entry = self._entry(call, resolved, ctx) if call.keywords or type(call.func) is ast.Call or (
                resolved is not None and resolved.rpartition(".")[2] in _ENTRY_NAMES) else None
            if entry is not None:
                entries.append(entry)
        for qual, used in loads.items():
            # load_function(path): import_module + getattr, or a library loader, on its argument
            if ("importlib.import_module" in used and "getattr" in used) or used & (BUILTIN_LOADERS - {"importlib.import_module"}):
                self.functions[qual]["loader"] = True
        for call, ctx in self.returns:
            _, resolved = self.call_name(call, ctx)
            params = self.params.get(ctx.function, ())
            # a function returning a loader's result on its own argument is a loader
            if resolved is not None and any(isinstance(a, ast.Name) and a.id in params for a in call.args):
                self.functions[ctx.function].setdefault("returns", []).append(resolved)
        binds: list[list[str]] = []
        # Only bound names this file calls matter (a subclass elsewhere calling self.fn is missed).
        called = {c for f in self.functions.values() for c in f["calls"]}
        heads = {c.partition(LOCAL)[2].split(".")[0] for c in called if LOCAL in c}
        for key, call, ctx in self.binds:
            name = key.partition(LOCAL)[2] if LOCAL in key else key[len(self.module) + 1 :]
            if key not in called and "@" not in key and name not in heads:
                continue
            _, resolved = self.call_name(call, ctx) if not isinstance(call.func, ast.Call) else (None, None)
            if resolved is None:
                continue
            binds.append([key, resolved, self._source_of(call)])
        for kind, qual, line in self.decorated:
            entries.append({"kind": kind, "target": f"{self.module}.{qual}", "line": line})
        if MAIN_BLOCK in self.functions:
            entries.append({"kind": "main", "target": f"{self.module}.{MAIN_BLOCK}",
                            "line": self.functions[MAIN_BLOCK]["line"]})
        elif self.module.rpartition(".")[2] == "__main__":  # `python -m pkg` runs __main__.py's body
            entries.append({"kind": "main", "target": f"{self.module}.{MODULE_BODY}", "line": 1})
        hooks = []
        for value in self.hooks:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                hooks.append(value.value)
            else:
                target = self.resolve(dotted(value), _Ctx(MODULE_BODY, None, ()))
                if target:
                    hooks.append(target)
        suppress: dict[int, list[str]] = {}
        for number, text in enumerate(self.lines, 1):
            if "detaudit" in text:
                match = _SUPPRESS.search(text)
                if match:
                    rules = match.group(1)
                    suppress[number] = [r.strip() for r in rules.split(",") if r.strip()] if rules else ["*"]
        return {
            "version": FACTS_VERSION,
            "module": self.module,
            "imports": self.imports,
            "functions": {f"{self.module}.{q}": v for q, v in self.functions.items()},
            "classes": {f"{self.module}.{q}": {**v, "methods": [f"{self.module}.{m}" for m in v["methods"]]}
                        for q, v in self.classes.items()},
            "draws": draws,
            "entries": entries,
            "hooks": hooks,
            "suppress": suppress,
            "strings": sorted(self.strings),
            "binds": binds,
        }

    def _source_of(self, node: ast.expr) -> str:
        """The node's code as written (its first line when it spans several), at most 120 characters."""
        line = self.lines[node.lineno - 1] if 0 < node.lineno <= len(self.lines) else ""
        end = node.end_col_offset if node.end_lineno == node.lineno else None
        text = line.encode("utf-8")[node.col_offset:end].decode("utf-8", "replace").strip()
        if end is None:
            text += " ..."
        return text if len(text) <= 120 else text[:117] + "..."

    def impact(self, call: ast.Call, ctx: _Ctx) -> str:
        """Why a drawn value cannot change results: it only reaches a port, address, sleep or temp name."""
        stmt = self.stmt_of.get(id(call))
        if stmt is None:
            return ""
        parents: dict[int, ast.AST] = {}
        for node in ast.walk(stmt):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        node: ast.AST = call
        while True:
            parent = parents.get(id(node))
            if parent is None:
                return ""
            if isinstance(parent, ast.keyword):
                if parent.arg and _sink_name(parent.arg):
                    return f"it only reaches the argument {parent.arg}="
                node = parent
                continue
            if isinstance(parent, ast.Call):
                if node is parent.func:
                    return ""
                callee = dotted(parent.func)
                full = self.resolve(callee, ctx) or callee or ""
                if full.startswith(SINK_CALLS):
                    return f"it only reaches {full}()"
                last = full.rpartition(".")[2]
                if last in ("bind", "connect") or _sink_name(last):
                    return f"it only reaches {last}()"
                if full in PASS_THROUGH_CALLS:
                    node = parent
                    continue
                return ""
            if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.FormattedValue, ast.JoinedStr, ast.Tuple)):
                node = parent
                continue
            if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node is parent.value:
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                names = [t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in targets]
                if names and all(_sink_name(n) for n in names):
                    return f"it only reaches {', '.join(names)}"
                return ""
            if isinstance(parent, ast.Return):
                last = ctx.function.rpartition(".")[2]
                return f"it is only returned by {last}()" if _sink_name(last) else ""
            return ""

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

    def _draw(self, rule: str, message: str, call: ast.Call, ctx: _Ctx, param: str = "") -> dict[str, Any]:
        guards = self._guard_texts(ctx)
        line = call.lineno
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return {"rule": rule, "message": message, "line": line, "end_line": getattr(call, "end_lineno", line) or line,
                "col": call.col_offset + 1, "function": f"{self.module}.{ctx.function}", "guards": guards, "code": code,
                "param": param, "impact": self.impact(call, ctx)}

    def _draw_rules(self, call: ast.Call, name: str | None, resolved: str | None,
                    none_params: dict[str, int]) -> list[tuple[str, str, str]]:
        """(rule, message, the None-default parameter that guards it or '') for each draw ``call`` makes."""
        func = call.func
        if (resolved is None or resolved.rpartition(".")[2] not in _DRAW_NAMES) and not (
                type(func) is ast.Attribute and func.attr in _DRAW_NAMES):  # type: ignore[attr-defined]
            return []  # every rule below needs one of these names as the callee's last part
        generator = next((k.value for k in call.keywords if k.arg == "generator"), None)
        # generator=generator where the enclosing function's `generator` defaults to None:
        # a guard only at the call sites that pass one (checked across modules).
        param = generator.id if isinstance(generator, ast.Name) and generator.id in none_params else ""
        has_generator = generator is not None and not param and not (
            isinstance(generator, ast.Constant) and generator.value is None)
        found = [(rule, message, param if FAMILY_OF_PARAM_RULES.get(rule) else "")
                 for rule, message in self._draw_rules_plain(call, resolved, has_generator)]
        return found

    def _draw_rules_plain(self, call: ast.Call, resolved: str | None, has_generator: bool) -> list[tuple[str, str]]:
        attr = call.func.attr if isinstance(call.func, ast.Attribute) else None
        found: list[tuple[str, str]] = []
        if resolved is not None:
            head, _, last = resolved.rpartition(".")
            if head in ("torch", "torch.random") and last in TORCH_DRAWS and not has_generator:
                found.append(("DA101", f"torch.{last}() draws from the global torch generator; pass generator="))
            elif head == "torch.nn.init" and last in TORCH_INIT and not has_generator:
                found.append(("DA103", f"torch.nn.init.{last}() draws from the global torch generator; pass generator="))
            elif resolved in TORCH_DROPOUT:
                found.append(("DA104", f"{last} draws its mask from the global torch generator"))
            elif head == "numpy.random" and last in NUMPY_LEGACY:
                found.append(("DA201", f"numpy.random.{last}() draws from the global RandomState; use a seeded np.random.default_rng(seed)"))
            elif resolved in _NUMPY_UNSEEDED and _no_seed(call):
                found.append(("DA202", f"numpy.random.{last}() without a seed takes OS entropy"))
            elif head == "random" and last in STDLIB_DRAWS:
                found.append(("DA301", f"random.{last}() draws from the global random.Random; use random.Random(seed)"))
            elif resolved == "random.Random" and _no_seed(call):
                found.append(("DA302", "random.Random() without a seed takes OS entropy"))
            elif resolved == "random.SystemRandom":
                found.append(("DA302", "random.SystemRandom draws from the OS and cannot be seeded"))
        if attr in TORCH_INPLACE and not has_generator and not found and not _is_module_call(resolved):
            found.append(("DA102", f".{attr}() fills a tensor from the global torch generator; pass generator="))
        if resolved in SEED_TAKERS or attr in ("manual_seed", "seed"):
            source = _entropy_source(call, self)
            if source:
                found.append(("DA303", f"seed comes from {source}(), which differs per run or process"))
        return found

    def _entry(self, call: ast.Call, resolved: str | None, ctx: _Ctx) -> dict[str, Any] | None:
        target: ast.expr | None = None
        kind = ""
        if resolved == "ray.remote" and call.args and not call.keywords:
            target, kind = call.args[0], "ray"
        elif isinstance(call.func, ast.Call) and self.resolve(dotted(call.func.func), ctx) == "ray.remote" and call.args:
            target, kind = call.args[0], "ray"  # ray.remote(num_gpus=1)(Cls)
        elif resolved is not None and resolved.endswith(".Process") and resolved.startswith(("multiprocessing", "torch.multiprocessing")):
            target = next((k.value for k in call.keywords if k.arg == "target"), None)
            kind = "multiprocessing"
        elif resolved in _MP_SPAWN and call.args:
            target, kind = call.args[0], "multiprocessing"
        else:
            target = next((k.value for k in call.keywords if k.arg == "worker_init_fn"), None)
            kind = "worker-init"
        if target is None:
            return None
        qualified = self.resolve(dotted(target), ctx)
        if qualified is None:
            return None
        return {"kind": kind, "target": qualified, "line": call.lineno}


FAMILY_OF_PARAM_RULES = {"DA101": True, "DA102": True, "DA103": True}


def _sink_name(identifier: str) -> bool:
    return any(word in SINK_WORDS for word in identifier.lower().strip("_").split("_"))


def _none_params(args: ast.arguments, is_method: bool) -> dict[str, int]:
    """Parameters that default to None -> positional index (self/cls not counted; -1: keyword-only)."""
    positional = args.posonlyargs + args.args
    if is_method and positional:
        positional = positional[1:]
    out: dict[str, int] = {}
    defaults = args.defaults
    for i, (arg, default) in enumerate(zip(positional[len(positional) - len(defaults):], defaults)):
        if isinstance(default, ast.Constant) and default.value is None:
            out[arg.arg] = len(positional) - len(defaults) + i
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if isinstance(default, ast.Constant) and default.value is None:
            out[arg.arg] = -1
    return out


def _call_site(call: ast.Call, none_params: dict[str, int]) -> tuple[int, int, tuple[str, ...]]:
    """A call's details as stored: (line, positional count, keywords passed a value other than None).

    A ``generator=None`` guard needs these to tell call sites that pass a generator from those that don't.
    """
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    passed = []
    for k in call.keywords:
        if k.arg is None or (isinstance(k.value, ast.Constant) and k.value.value is None):
            continue
        # forwarding our own None-default parameter: "kw<param" (passes only if our caller passes)
        passed.append(f"{k.arg}<{k.value.id}" if isinstance(k.value, ast.Name) and k.value.id in none_params else k.arg)
    return (call.lineno, 99 if starred else len(call.args), tuple(passed))


def _is_main_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [test.left, test.comparators[0]]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        return bool(names and consts)
    return False


def _is_ray_remote(dec: ast.expr, facts: FileFacts) -> bool:
    node = dec.func if isinstance(dec, ast.Call) else dec
    return facts.resolve(dotted(node), _Ctx(MODULE_BODY, None, ())) == "ray.remote"


def _no_seed(call: ast.Call) -> bool:
    args = list(call.args) + [k.value for k in call.keywords if k.arg in ("seed", "x", "entropy")]
    return not args or all(isinstance(a, ast.Constant) and a.value is None for a in args)


def _is_module_call(resolved: str | None) -> bool:
    # torch.nn.init.normal_ etc. resolve to a module path: not a tensor method.
    return resolved is not None and resolved.split(".")[0] in ("torch", "numpy", "random", "math")


def _entropy_source(call: ast.Call, facts: FileFacts) -> str | None:
    for arg in list(call.args) + [k.value for k in call.keywords]:
        for sub in ast.walk(arg):
            if isinstance(sub, ast.Call):
                name = dotted(sub.func)
                resolved = facts.resolve(name, _Ctx(MODULE_BODY, None, ())) or name
                if resolved in ENTROPY_CALLS:
                    return resolved
    return None


def file_facts(module: str, source: str, is_package: bool = False) -> dict[str, Any]:
    """Parse ``source`` (raises SyntaxError) and return its facts."""
    tree = ast.parse(source)
    return FileFacts(module, source, is_package).run(tree).facts()

