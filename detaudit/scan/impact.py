"""Impact of a draw: whether its value is shown to reach only a port, an address, a sleep, a temp
name, a server picked for a request, what is logged or traced, a dummy, or is thrown away.

Such a draw never moves a metric, so it is at most a warning. Demotion by a name alone is not
enough: the value is followed from the draw through its own statement (``int()``, ``str()``,
``set()``, methods called on it, comparisons, arithmetic, f-strings, comprehensions) and, when it is
assigned to a local variable, through every use of that variable in the function (and of the
locals it flows into, a few steps deep). It is inert only when every path ends in a sink: an
argument named like one (``port=``, ``trace=``), a sink call (``socket.*``, ``time.sleep``,
``asyncio.sleep``, ``tempfile.*``, ``.bind()``), an attribute, subscript or ``os.environ`` key named
like one (``self.master_port = ...``: where a stored value goes next is not followed), a return
from a function so named, or a discarded statement. A local named ``temp``, ``jitter`` or ``delay``
is followed like any other: ``temp = random.uniform(0.5, 1.0)`` then ``SamplingParams(temperature=temp)``
is no sink. Also inert: a shuffle of (or pick from) a sequence so named (``random.shuffle(port_candidates)``),
a draw in a function so named (``_bind_socket_in_range``), random characters joined into a name
(``"".join(random.choice(letters) for _ in range(8))``), a value discarded (``torch.randn(1).cuda()``
as a statement; not an in-place fill or shuffle).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

# Impact: where a drawn value may go without making results differ between runs.
# Identifier words (split at "_") that name a port, an address, a sleep/jitter, a temp name, a
# server or replica picked for a request (load balancing), what is printed or logged, or a
# dummy whose values nobody reads (only its shape matters).
SINK_WORDS = frozenset({
    "port", "ports", "addr", "address", "host", "hostname", "sock", "socket", "sleep", "jitter", "delay",
    "backoff", "tmp", "temp", "tmpdir", "tempdir", "tmpname", "tempname", "tmpfile", "tempfile", "timeout",
    "server", "servers", "replica", "replicas", "endpoint", "endpoints", "url", "urls",
    "print", "logging", "verbose", "debug", "display", "dummy", "placeholder", "trace", "traced", "tracing",
})
# A function named with one of these words picks a port, an address or a temp name: its draws do no more.
PICKER_WORDS = frozenset({"port", "ports", "addr", "address", "socket", "sock", "tmpdir", "tempdir", "tmpname", "tempname"})
# Whole identifiers that name such a pick (a data-parallel rank chosen to serve a request).
SINK_IDENTIFIERS = frozenset({"dp_rank"})
# Calls whose arguments are such sinks (prefixes).
SINK_CALLS = ("socket.", "time.sleep", "asyncio.sleep", "tempfile.")
# Calls a drawn value may pass through on its way to a sink.
PASS_THROUGH_CALLS = frozenset({"int", "str", "float", "round", "abs", "min", "max", "format", "repr", "hex", "bool",
                                "set", "list", "tuple", "sorted", "frozenset", "len"})

# Draws that permute or pick from their first argument: a sequence of ports stays ports.
_PICKS_FROM = frozenset({"shuffle", "choice", "choices", "sample", "permutation"})
MAX_LOCALS_FOLLOWED = 8  # locals a value is followed through before giving up (not inert)
_COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)
_PASSING = (ast.BinOp, ast.UnaryOp, ast.FormattedValue, ast.JoinedStr, ast.Tuple, ast.List, ast.Set, ast.Compare,
            ast.BoolOp, ast.IfExp, ast.Subscript, ast.Starred, ast.Await)


def sink_name(identifier: str) -> bool:
    """An identifier (or an environment variable's name) that names a port, address, sleep or temp name."""
    lowered = identifier.lower().strip("_")
    return lowered in SINK_IDENTIFIERS or any(word in SINK_WORDS for word in lowered.split("_"))


def _target_name(target: ast.expr) -> str:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
        return target.slice.value  # os.environ["MASTER_PORT"] = ...
    return ""


# Where a use of a drawn value ends (see _Flow): a sink; out of what the walk follows (an unknown
# function's argument, a return, a store into an attribute not named like a sink); or into data
# (a named parameter that is no sink: temperature=, another value it perturbs: x + jitter, an
# index, an `if` or loop it steers).
SINK, ESCAPE, DATA = "sink", "escape", "data"
Outcome = tuple[str, str]  # (SINK | ESCAPE | DATA, why: the sink's description, or where it went)
# Attributes of a tensor or array that do not depend on its values.
VALUE_FREE = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout"})
VALUE_FREE_CALLS = frozenset({"size", "dim", "numel", "nelement"})


def _worst(outcomes: list[Outcome]) -> Outcome:
    for kind in (DATA, ESCAPE):
        found = [o for o in outcomes if o[0] == kind]
        if found:
            return found[0]
    return outcomes[0]


# Fields that hold no expression or statement (contexts, operators, identifiers, flags).
_LEAVES = frozenset({"ctx", "op", "ops", "id", "arg", "attr", "kind", "conversion", "type_comment", "level",
                     "module", "is_async", "simple", "names", "name", "asname"})
_FIELDS: dict[type, tuple[str, ...]] = {}


class Scope:
    """One walk of a function (or of a statement when the function is not known), kept for each of
    its draws: every node's parent, the loads of each name, and the names declared global or
    nonlocal."""

    def __init__(self, root: ast.AST) -> None:
        self.root = root
        self.parents: dict[int, ast.AST] = {}
        self.loads: dict[str, list[ast.Name]] = {}
        self.shared: set[str] = set()  # global / nonlocal names: not the function's own
        self.function = isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef))
        parents, loads = self.parents, self.loads
        todo: list[Any] = [root]  # breadth first, without ast.walk's generators (a third of its time)
        push, AST, Name, Load, Constant = todo.append, ast.AST, ast.Name, ast.Load, ast.Constant
        for node in todo:
            kind = type(node)
            if kind is Name:
                if type(node.ctx) is Load:
                    loads.setdefault(node.id, []).append(node)
                continue
            if kind is Constant:  # no child node: its value is a Python object
                continue
            if kind is ast.Global or kind is ast.Nonlocal:
                self.shared.update(node.names)
                continue
            fields = _FIELDS.get(kind)
            if fields is None:
                fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _LEAVES)
            for field in fields:
                child = getattr(node, field, None)
                if type(child) is list:
                    for item in child:
                        if isinstance(item, AST):
                            parents[id(item)] = node
                            push(item)
                elif isinstance(child, AST):
                    parents[id(child)] = node
                    push(child)


class _Flow:
    """Follows one drawn value through its function (see the module doc)."""

    def __init__(self, scope: Scope, function: str, resolve: Callable[[ast.expr], str]) -> None:
        self.scope = scope
        self.function = function
        self.resolve = resolve
        self.parents = scope.parents
        self.followed: set[str] = set()
        self.names: list[str] = []  # the sink-like names the value was kept under (`dummy_tensor`)

    def follow(self, node: ast.AST) -> Outcome:
        """Where the value of ``node`` (an expression of the scope) goes."""
        current: ast.AST = node
        per_element = False  # the value makes each element of a comprehension
        while True:
            parent = self.parents.get(id(current))
            if parent is None:
                return ESCAPE, "its expression"
            if isinstance(parent, ast.keyword):
                if parent.arg and sink_name(parent.arg):
                    return SINK, f"it only reaches the argument {parent.arg}="
                call = self.parents.get(id(parent))
                sink = self._sink_call(call) if isinstance(call, ast.Call) else ""
                if sink:
                    return SINK, sink  # tempfile.mkdtemp(prefix=...): any argument of a sink
                if parent.arg:
                    return DATA, f"the argument {parent.arg}="
                current = parent
                continue
            if isinstance(parent, ast.Attribute):
                grand = self.parents.get(id(parent))
                if isinstance(grand, ast.Call) and grand.func is parent:  # x.tolist(), x.item(): a method, called
                    if parent.attr in VALUE_FREE_CALLS:
                        return SINK, f"only its {parent.attr}() is used"
                    current = grand
                    continue
                if parent.attr in VALUE_FREE:
                    return SINK, f"only its {parent.attr} is used"
                return ESCAPE, f"its .{parent.attr}"
            if isinstance(parent, ast.Call):
                if current is parent.func:
                    return ESCAPE, "a call of it"
                full = self.resolve(parent.func)
                if per_element and isinstance(parent.func, ast.Attribute) and parent.func.attr == "join" and isinstance(
                        parent.func.value, ast.Constant) and parent.func.value.value == "":
                    return SINK, "it only builds a random name (\"\".join of random characters)"
                sink = self._sink_call(parent)
                if sink:
                    return SINK, sink
                last = full.rpartition(".")[2] or (parent.func.attr if isinstance(parent.func, ast.Attribute) else "")
                if full in PASS_THROUGH_CALLS:
                    current = parent
                    continue
                return ESCAPE, f"{last or 'a call'}()"
            if isinstance(parent, _COMPREHENSIONS) and current is not getattr(parent, "elt", None) \
                    and not isinstance(current, ast.comprehension):
                return ESCAPE, "a dict it builds"  # a DictComp's key or value
            if isinstance(parent, _COMPREHENSIONS):
                per_element = per_element or current is getattr(parent, "elt", None)
                current = parent  # an element, or a filter: the collection is made of it
                continue
            if isinstance(parent, ast.comprehension):
                if current is parent.iter:
                    return DATA, "a loop it steers"
                current = parent
                continue
            if isinstance(parent, ast.BinOp):
                other = parent.right if current is parent.left else parent.left
                if not isinstance(other, ast.Constant):
                    return DATA, "another value it changes"  # x + jitter
                current = parent
                continue
            if isinstance(parent, ast.Subscript) and current is parent.slice:
                return DATA, "an index"  # data[port]
            if isinstance(parent, _PASSING):
                current = parent
                continue
            if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and current is parent.value:
                targets: list[ast.expr] = list(parent.targets) if isinstance(parent, ast.Assign) else [parent.target]
                return self._assigned(targets)
            if isinstance(parent, ast.Return):
                last = self.function.rpartition(".")[2]
                if sink_name(last):
                    return SINK, f"it is only returned by {last}()"
                return ESCAPE, f"the return of {last}()"
            if isinstance(parent, ast.Expr):
                return (SINK, "its value is discarded") if not per_element else (ESCAPE, "a discarded collection")
            if isinstance(parent, ast.If) and current is parent.test:
                if _only_logs(parent.body + parent.orelse):
                    return SINK, "it only decides what is printed or logged"
                return DATA, "an `if` it steers"
            if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
                return DATA, "a loop it steers"
            return ESCAPE, type(parent).__name__

    def _sink_call(self, call: ast.Call) -> str:
        """Why a call is a sink (``time.sleep``, ``socket.*``, ``tempfile.*``, ``.bind()``, a name
        like a port's), or ''."""
        full = self.resolve(call.func)
        if full.startswith(SINK_CALLS):
            return f"it only reaches {full}()"
        last = full.rpartition(".")[2] or (call.func.attr if isinstance(call.func, ast.Attribute) else "")
        if last in ("bind", "connect") or (last and sink_name(last)):
            return f"it only reaches {last}()"
        return ""

    def _assigned(self, targets: list[ast.expr]) -> Outcome:
        """Where a value assigned to ``targets`` goes: sink-named attributes or keys end the walk; a
        local is followed through its uses."""
        outcomes = []
        for target in targets:
            name = _target_name(target)
            if isinstance(target, ast.Name) and self._local(target.id):
                if sink_name(target.id):
                    self.names.append(target.id)
                outcomes.append(self._uses(target.id))
            elif isinstance(target, (ast.Attribute, ast.Subscript, ast.Name)) and name and sink_name(name):
                outcomes.append((SINK, f"it only reaches {name}"))
            else:
                outcomes.append((ESCAPE, name or "a store"))
        return _worst(outcomes) if outcomes else (ESCAPE, "a store")

    def _local(self, name: str) -> bool:
        """``name`` is a local of the function (a module's or class body's names can be used from
        anywhere; ``global`` / ``nonlocal`` ones too)."""
        return self.scope.function and name not in self.scope.shared

    def _uses(self, name: str) -> Outcome:
        """Where the uses of local ``name`` in the function go (no use: it is discarded)."""
        if len(self.followed) >= MAX_LOCALS_FOLLOWED:
            return ESCAPE, name
        if name in self.followed:
            return SINK, "it only flows around a loop"  # the other uses decide
        self.followed.add(name)
        outcomes = [self.follow(node) for node in self.scope.loads.get(name, ())]
        outcomes = [o for o in outcomes if o != (SINK, "it only flows around a loop")] or outcomes
        return _worst(outcomes) if outcomes else (SINK, "its value is never used")


_LOGGERS = ("logger", "logging", "log", "_logger", "LOGGER", "LOG")


def _only_logs(stmts: list[ast.stmt]) -> bool:
    """Every statement prints or logs (``print(...)``, ``logger.info(...)``), or is an ``if`` whose
    branches only do so: code a value decides to run changes nothing but output."""
    for stmt in stmts:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.If):
            if not _only_logs(stmt.body + stmt.orelse):
                return False
            continue
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        func = stmt.value.func
        if isinstance(func, ast.Name) and func.id in ("print", "pprint"):
            continue
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in _LOGGERS:
            continue
        return False
    return bool(stmts)


def impact(call: ast.Call, stmt: ast.stmt | None, function: str, resolve: Callable[[ast.expr], str],
           scope: Scope | None = None) -> tuple[str, str]:
    """(why a drawn value cannot change results: 'it only reaches master_port', or ''; why it may
    not, going by a name alone: 'only its name says it is inert: dummy_tensor; it flows on into
    project()' when it is kept under a name like a sink's and flows where the walk does not follow,
    or '').

    ``stmt``: the statement holding ``call``; ``function``: the enclosing function's local
    qualname; ``resolve``: a callee expression's qualified name ('' when unknown); ``scope``: the
    enclosing function's ``Scope`` (made once for all its draws; None: only the statement is read).
    """
    callee = resolve(call.func)
    last = callee.rpartition(".")[2] or (call.func.attr if isinstance(call.func, ast.Attribute) else "")
    if last in _PICKS_FROM and call.args:
        source = _target_name(call.args[0])
        if source and sink_name(source):
            return f"it only picks from {source}", ""
    enclosing = function.rpartition(".")[2]
    if not enclosing.startswith("<") and any(w in PICKER_WORDS for w in enclosing.lower().strip("_").split("_")):
        return f"it is drawn in {enclosing}(), which picks a port, address or name", ""
    if stmt is None or (isinstance(stmt, ast.Expr) and (last.endswith("_") or last == "shuffle")):
        return "", ""  # an in-place fill or shuffle as a statement: its effect is the draw
    flow = _Flow(scope if scope is not None else Scope(stmt), function, resolve)
    kind, why = flow.follow(call)
    if kind == SINK:
        return why, ""
    if kind == ESCAPE and flow.names:
        return "", f"only its name says it is inert: {flow.names[0]}; it flows on into {why}, which is not followed"
    return "", ""
