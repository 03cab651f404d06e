"""Conditions on a function's parameters, as plain data, and their value for known arguments.

Seeding that a function does only under ``if seed_rngs:``, or through a call whose seeding flag
it computes from a parameter (``enable(seed, seed_rngs=not skip)`` with
``skip = role == "rollout_manager" and not det.seed_rollout_manager``), depends on what its
callers pass. A file's facts keep such conditions as nested lists over the function's
parameters; the analysis evaluates them with the constants a call passes (``setup(cfg,
"rollout_manager")``). Three-valued: True, False, or UNKNOWN (a value the scan cannot know); only
a condition that is False for certain switches seeding off, so an unknown one keeps it.

Forms: ``["c", value]`` (a constant: bool, str or None), ``["p", name]`` (a parameter),
``["not", e]``, ``["and", e, ...]``, ``["or", e, ...]``, ``["eq", a, b]``, ``["ne", a, b]``,
``["?"]`` (anything else).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

Expr = list[Any]
UNKNOWN_EXPR: Expr = ["?"]
MAX_DEPTH = 4  # locals followed to the parameters they come from


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
_COMPARE = {ast.Eq: "eq", ast.Is: "eq", ast.NotEq: "ne", ast.IsNot: "ne"}


def param(name: str) -> Expr:
    """The condition form of a parameter named ``name``."""
    return ["p", name]


def encode(node: ast.expr, is_param: Callable[[str], bool], value_of: Callable[[str], ast.expr | None],
           depth: int = 0) -> Expr:
    """``node`` as a condition over parameters: ``is_param(name)`` says a name is one (never
    reassigned), ``value_of(name)`` gives the one value a local is assigned (None: not one)."""
    kind = type(node)
    if kind is ast.Constant:
        value = node.value  # type: ignore[attr-defined]
        return ["c", value] if value is None or type(value) in (bool, str) else UNKNOWN_EXPR
    if kind is ast.Name:
        name = node.id  # type: ignore[attr-defined]
        if is_param(name):
            return param(name)
        value = value_of(name) if depth < MAX_DEPTH else None
        return encode(value, is_param, value_of, depth + 1) if value is not None else UNKNOWN_EXPR
    if kind is ast.UnaryOp and isinstance(node.op, ast.Not):  # type: ignore[attr-defined]
        return ["not", encode(node.operand, is_param, value_of, depth)]  # type: ignore[attr-defined]
    if kind is ast.BoolOp:
        op = "and" if isinstance(node.op, ast.And) else "or"  # type: ignore[attr-defined]
        return [op, *(encode(v, is_param, value_of, depth) for v in node.values)]  # type: ignore[attr-defined]
    if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:  # type: ignore[attr-defined]
        return [_COMPARE[type(node.ops[0])], encode(node.left, is_param, value_of, depth),  # type: ignore[attr-defined]
                encode(node.comparators[0], is_param, value_of, depth)]  # type: ignore[attr-defined]
    return UNKNOWN_EXPR


def uses_param(expr: Expr) -> bool:
    """Whether a condition names a parameter (else its value is the same at every call)."""
    if not expr:
        return False
    if expr[0] == "p":
        return True
    return expr[0] != "c" and any(isinstance(e, list) and uses_param(e) for e in expr[1:])


def known(expr: Expr) -> bool:
    """Whether a condition's value needs no argument: a constant, or built only of constants."""
    if expr[0] == "c":
        return True
    return expr[0] in ("not", "and", "or", "eq", "ne") and all(known(e) for e in expr[1:])


def value(expr: Expr, env: dict[str, Any]) -> Any:
    """The condition's value with the parameters ``env`` gives (absent: UNKNOWN)."""
    op = expr[0]
    if op == "c":
        return expr[1]
    if op == "p":
        return env.get(expr[1], UNKNOWN)
    if op == "not":
        inner = value(expr[1], env)
        return UNKNOWN if inner is UNKNOWN else not inner
    if op in ("and", "or"):
        stop = op == "or"  # `or` is decided by a true operand, `and` by a false one
        undecided = False
        for operand in expr[1:]:
            v = value(operand, env)
            if v is UNKNOWN:
                undecided = True
            elif bool(v) is stop:
                return stop
        return UNKNOWN if undecided else not stop
    if op in ("eq", "ne"):
        left, right = value(expr[1], env), value(expr[2], env)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return (left == right) is (op == "eq")
    return UNKNOWN


def false_for(expr: Expr, env: dict[str, Any]) -> bool:
    """Whether the condition is false for certain with these arguments."""
    v = value(expr, env)
    return v is not UNKNOWN and not v
