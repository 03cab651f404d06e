"""Rule DA401's matcher: results gathered in completion order that reach a batch, followed inside
the one function (or module body) that gathers them.

A gather hands results back as their work finishes: ``ray.wait``, ``as_completed`` (of
``concurrent.futures`` and asyncio), ``asyncio.wait`` / ``concurrent.futures.wait`` with
``return_when=FIRST_COMPLETED`` (or ``FIRST_EXCEPTION``). The names it binds (``ready, pending =
ray.wait(...)``, ``for f in as_completed(...)``, ``done, _ = await asyncio.wait(...)``) are
followed through assignments, ``+=``, ``.append`` / ``.extend`` / ``.insert`` / ``.add``, item
assignment and comprehensions, in any order of the function's statements, to a call that makes a
batch of them (``torch.cat``, ``torch.stack``, ``np.concatenate``, ``np.stack``, a tensor or array
built from them). A function nested in the gathering one has variables of its own (its
parameters and the names it binds): the gathered ``indices`` does not flow into a helper's parameter
``indices``; the names it only reads are the gathering function's. Not followed: a result returned
to the caller or stored on an object. A result put back in submission order (sorted by its index) still reads as reaching the batch:
the matcher cannot tell that key from another; such a line is suppressed with
``# detaudit: ignore[DA401]``.
"""

from __future__ import annotations

import ast

GATHERS = frozenset({
    "ray.wait", "concurrent.futures.as_completed", "concurrent.futures._base.as_completed",
    "asyncio.as_completed", "asyncio.tasks.as_completed",
})
WAITS = frozenset({"asyncio.wait", "asyncio.tasks.wait", "concurrent.futures.wait", "concurrent.futures._base.wait"})
CALLEES = GATHERS | WAITS
FIRST = ("FIRST_COMPLETED", "FIRST_EXCEPTION")
BATCHERS = frozenset({"cat", "concat", "concatenate", "stack", "vstack", "hstack", "dstack", "column_stack",
                      "tensor", "as_tensor", "array", "asarray", "stack_tensors", "pad_sequence"})
GROWERS = frozenset({"append", "extend", "insert", "add", "appendleft", "update"})
MAX_ROUNDS = 16


Variable = tuple[int, str]  # (the function that owns it: 0 for the gathering scope, its name)
Owners = dict[ast.Name, int]  # the names that a function nested in the scope owns: its locals


def _locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names local to a nested function: its parameters and the names it binds (nonlocal and
    global ones excepted), in its own body, not in functions nested in it."""
    params = function.args
    names = {a.arg for a in [*params.posonlyargs, *params.args, *params.kwonlyargs,
                             *filter(None, [params.vararg, params.kwarg])]}
    free: set[str] = set()
    todo: list[ast.AST] = [function.body] if isinstance(function, ast.Lambda) else list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Nonlocal, ast.Global)):
            free.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return names - free


def _owners(scope: ast.AST) -> Owners:
    """Which nested function owns each name read or bound in ``scope``: a helper defined inside the
    gathering function whose parameter is also called ``indices`` has a variable of its own, which
    the gathered ``indices`` never flows into."""
    owners: Owners = {}
    todo: list[tuple[ast.AST, dict[str, int]]] = [(child, {}) for child in ast.iter_child_nodes(scope)]
    while todo:
        node, outer = todo.pop()
        if isinstance(node, ast.Name) and node.id in outer:
            owners[node] = outer[node.id]
        inner = outer
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = {**outer, **dict.fromkeys(_locals(node), id(node))}
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))
    return owners


def _bound(target: ast.AST, owners: Owners) -> set[Variable]:
    """The variables an assignment target binds (``a, b``, ``x[k]``: ``x``, ``o.attr``: ``o``)."""
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        target = target.value
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound(t, owners) for t in target.elts)) if target.elts else set()
    return {(owners.get(target, 0), target.id)} if isinstance(target, ast.Name) else set()


def _last(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _first_completed(call: ast.Call) -> bool:
    """``return_when=FIRST_COMPLETED`` (or ``FIRST_EXCEPTION``), by keyword or third argument."""
    value = next((k.value for k in call.keywords if k.arg == "return_when"), None)
    if value is None and len(call.args) >= 3:
        value = call.args[2]
    if value is None:
        return False
    text = value.value if isinstance(value, ast.Constant) else _last(value)
    return isinstance(text, str) and text in FIRST


def _walk(node: ast.AST) -> list[ast.AST]:
    """Every node under ``node`` (itself included), in ``ast.walk``'s breadth-first order, as one list:
    the matcher reads a scope's nodes several times, and a list is walked far faster than the generator."""
    todo: list[ast.AST] = [node]
    for sub in todo:  # the list grows while it is read: that is the queue
        for field in sub._fields:
            child = getattr(sub, field, None)
            if type(child) is list:
                todo.extend(item for item in child if isinstance(item, ast.AST))
            elif isinstance(child, ast.AST):
                todo.append(child)
    return todo


def _flows(nodes: list[ast.AST], owners: Owners) -> list[tuple[set[Variable], ast.AST]]:
    """(names bound, what they are bound from) for every binding among ``nodes`` (a scope's, in walk order)."""
    out: list[tuple[set[Variable], ast.AST]] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            out += [(_bound(t, owners), node.value) for t in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            out.append((_bound(node.target, owners), node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            out.append((_bound(node.target, owners), node.iter))
        elif isinstance(node, ast.NamedExpr):
            out.append((_bound(node.target, owners), node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GROWERS:
            out.append((_bound(node.func.value, owners), ast.Tuple(elts=list(node.args), ctx=ast.Load())))
    return out


def _reads(value: ast.AST, owners: Owners, call: ast.Call) -> tuple[set[Variable], bool]:
    """The variables ``value`` reads, and whether it holds ``call`` itself (one walk for both)."""
    nodes = _walk(value)
    return {(owners.get(n, 0), n.id) for n in nodes if isinstance(n, ast.Name)}, any(n is call for n in nodes)


def batch_reached(call: ast.Call, callee: str, scope: ast.AST | None) -> tuple[str, int] | None:
    """(the batching call's text, its line) that ``call``'s results reach in ``scope``, or None."""
    if scope is None or callee not in CALLEES or (callee in WAITS and not _first_completed(call)):
        return None
    nodes = _walk(scope)
    # Names owned by a function nested in the scope: none when it nests none (the common case).
    nested = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in nodes[1:])
    owners = _owners(scope) if nested else {}
    # What each binding reads, found once: the rounds below only intersect sets.
    flows = [(names, *_reads(value, owners, call)) for names, value in _flows(nodes, owners)]
    tainted: set[Variable] = set()
    for names, _, holds_call in flows:
        if holds_call:
            tainted |= names
    for _ in range(MAX_ROUNDS):
        grown = set(tainted)
        for names, read, _ in flows:
            if not names <= grown and read & grown:
                grown |= names
        if grown == tainted:
            break
        tainted = grown

    def reaches(arg: ast.AST) -> bool:  # a tainted name, or the gather itself: torch.stack([... for f in as_completed(fs)])
        read, holds_call = _reads(arg, owners, call)
        return bool(read & tainted) or holds_call

    sinks = [node for node in nodes if isinstance(node, ast.Call) and _last(node.func) in BATCHERS
             and any(reaches(arg) for arg in [*node.args, *(k.value for k in node.keywords)])]
    if not sinks:
        return None
    sink = min(sinks, key=lambda node: (node.lineno, node.col_offset))
    text = ast.unparse(sink.func)
    return text, sink.lineno
