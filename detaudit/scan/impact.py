"""Impact of a draw: whether its value can only reach a port, an address, a sleep, a temp name, a
server picked for a request, what is logged, a dummy, or is thrown away.

Such a draw never moves a metric, so it is at most a warning. The test is syntactic, inside the
draw's own statement: the value goes (through ``int()``, ``str()``, comparisons, arithmetic,
f-strings) into an argument, an assignment target or ``os.environ`` key named like a sink, into a
sink call (``socket.*``, ``time.sleep``, ``tempfile.*``, ``.bind()``), or out of a function so
named; or the draw shuffles or picks from a sequence so named (``random.shuffle(port_candidates)``);
or it is made in a function so named (``_bind_socket_in_range``); or it only builds a name
(``"".join(random.choice(letters) for _ in range(8))``); or its value is discarded
(``torch.randn(1).cuda()`` as a statement; not an in-place fill or shuffle).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from detaudit.scan.rules import (
    PASS_THROUGH_CALLS,
    PICKER_WORDS,
    SINK_CALLS,
    SINK_IDENTIFIERS,
    SINK_WORDS,
)

# Draws that permute or pick from their first argument: a sequence of ports stays ports.
_PICKS_FROM = frozenset({"shuffle", "choice", "choices", "sample", "permutation"})


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


def impact(call: ast.Call, stmt: ast.stmt | None, function: str, resolve: Callable[[ast.expr], str]) -> str:
    """Why a drawn value cannot change results ('it only reaches master_port'), or ''.

    ``stmt``: the statement holding ``call``; ``function``: the enclosing function's local
    qualname; ``resolve``: a callee expression's qualified name ('' when unknown).
    """
    callee = resolve(call.func)
    last = callee.rpartition(".")[2] or (call.func.attr if isinstance(call.func, ast.Attribute) else "")
    if last in _PICKS_FROM and call.args:
        source = _target_name(call.args[0])
        if source and sink_name(source):
            return f"it only picks from {source}"
    enclosing = function.rpartition(".")[2]
    if not enclosing.startswith("<") and any(w in PICKER_WORDS for w in enclosing.lower().strip("_").split("_")):
        return f"it is drawn in {enclosing}(), which picks a port, address or name"
    if stmt is None:
        return ""
    if isinstance(stmt, ast.Expr) and not last.endswith("_") and last != "shuffle" and _discards(stmt.value, call):
        return "its value is discarded"
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(stmt):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    current: ast.AST = call
    per_element = False  # the draw makes each element of a comprehension
    while True:
        parent = parents.get(id(current))
        if parent is None:
            return ""
        if isinstance(parent, ast.keyword):
            if parent.arg and sink_name(parent.arg):
                return f"it only reaches the argument {parent.arg}="
            current = parent
            continue
        if isinstance(parent, ast.Call):
            if current is parent.func:
                return ""
            full = resolve(parent.func)
            if per_element and isinstance(parent.func, ast.Attribute) and parent.func.attr == "join" and isinstance(
                    parent.func.value, ast.Constant) and parent.func.value.value == "":
                return "it only builds a random name (\"\".join of random characters)"
            if full.startswith(SINK_CALLS):
                return f"it only reaches {full}()"
            last = full.rpartition(".")[2]
            if last in ("bind", "connect") or sink_name(last):
                return f"it only reaches {last}()"
            if full in PASS_THROUGH_CALLS:
                current = parent
                continue
            return ""
        if isinstance(parent, (ast.GeneratorExp, ast.ListComp)) and current is parent.elt:
            current = parent  # a random character of "".join(...): see below
            per_element = True
            continue
        if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.FormattedValue, ast.JoinedStr, ast.Tuple, ast.Compare,
                               ast.BoolOp)):
            current = parent
            continue
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and current is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = [_target_name(t) for t in targets]
            if names and all(n and sink_name(n) for n in names):
                return f"it only reaches {', '.join(names)}"
            return ""
        if isinstance(parent, ast.Return):
            last = function.rpartition(".")[2]
            return f"it is only returned by {last}()" if sink_name(last) else ""
        return ""


def _discards(value: ast.expr, call: ast.Call) -> bool:
    """The statement's value is the draw, or methods called on it (``torch.randn(1).cuda()``)."""
    while value is not call:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            value = value.func.value
        elif isinstance(value, ast.Await):
            value = value.value
        else:
            return False
    return True
