"""Bit-level float helpers and a JSON encoding of metric values that any parser reads.

Finite floats are written with ``repr`` (shortest string that round-trips to the same
binary64), so they stay plain JSON numbers. NaN and the infinities, which strict JSON has
no literal for, become ``{"float": "NaN"}``, ``{"float": "Infinity"}``,
``{"float": "-Infinity"}``: an object, so a real string value "NaN" stays distinguishable.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from typing import Any

_PACK = struct.Struct("<d")
_INT = struct.Struct("<q")

NONFINITE_KEY = "float"
# Metric values nest (arrays of arrays); deeper than this is not a metric, and every
# recursive walk over values stays far from Python's recursion limit.
MAX_DEPTH = 64


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()  # a point a run does not have


def _ordered(x: float) -> int:
    # Map binary64 onto a line of integers where adjacent floats differ by 1.
    i = _INT.unpack(_PACK.pack(x))[0]
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)


def ulp_distance(a: float, b: float) -> int | None:
    """How many representable doubles lie between ``a`` and ``b`` (None for NaN)."""
    if math.isnan(a) or math.isnan(b):
        return None
    return abs(_ordered(a) - _ordered(b))


def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) or (a != a and b != b)


def same_value(a: Any, b: Any) -> bool:
    """Exact match: same JSON type and, for floats, the same bits (NaN == NaN, 0.0 != -0.0).

    Arrays and objects match when every element does, by the same rule (so ``[1, 0.0]``
    does not match ``[1.0, -0.0]``, which Python's ``==`` would call equal).
    """
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return _same_float(a, b)
    if type(a) is list or type(a) is dict:
        return first_difference(a, b) is None
    return a == b


def first_difference(a: Any, b: Any) -> tuple[Any, Any] | None:
    """The first pair of elements (depth first) where ``a`` and ``b`` differ, None if they match.

    A pair of containers is returned where their lengths or keys differ. Iterative, so
    depth cannot overflow the stack.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        tx = type(x)
        if tx is not type(y):
            return x, y
        if tx is float:
            if not _same_float(x, y):
                return x, y
        elif tx is list:
            if len(x) != len(y):
                return x, y
            stack.extend(reversed(list(zip(x, y, strict=False))))
        elif tx is dict:
            if x.keys() != y.keys():
                return x, y
            stack.extend(reversed([(x[k], y[k]) for k in x]))
        elif x != y:
            return x, y
    return None


def depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (0 for a scalar); iterative."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        children: Iterable[Any]
        if type(item) is list:
            children = item
        elif type(item) is dict:
            children = item.values()
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > MAX_DEPTH:
                return deepest
        stack.extend((child, level) for child in children)
    return deepest


def is_encoded_nonfinite(value: Any) -> bool:
    """True for ``{"float": ...}``: the encoded form of a non-finite float, reserved in values."""
    return type(value) is dict and len(value) == 1 and NONFINITE_KEY in value


def contains_encoded_nonfinite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            if is_encoded_nonfinite(item):
                return True
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def to_float(value: int | float) -> float:
    """``float(value)``, with +-inf for integers beyond float range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def encode_value(value: Any) -> Any:
    """A JSON-safe form of a metric value or step (see module doc), also inside arrays and objects."""
    if type(value) is float and not math.isfinite(value):
        if value != value:
            return {NONFINITE_KEY: "NaN"}
        return {NONFINITE_KEY: "Infinity" if value > 0 else "-Infinity"}
    if type(value) is list:
        return [encode_value(v) for v in value]
    if type(value) is dict:
        return {k: encode_value(v) for k, v in value.items()}
    return value


_DECODE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``; also accepts bare NaN/Infinity that Python's json parsed."""
    if type(value) is dict:
        if len(value) == 1 and NONFINITE_KEY in value:
            try:
                return _DECODE[value[NONFINITE_KEY]]
            except (KeyError, TypeError):
                raise ValueError(f"unknown non-finite float {value[NONFINITE_KEY]!r}") from None
        return {k: decode_value(v) for k, v in value.items()}
    if type(value) is list:
        return [decode_value(v) for v in value]
    return value


# Python refuses str() of integers over 4300 digits; a report names their size instead.
_MAX_INT_BITS = 14000


def format_value(value: Any) -> str:
    """Human-readable, exact: floats by repr (round-trips), others as JSON would show them.

    ``ABSENT`` (a point a run does not have) is "absent".
    """
    if value is ABSENT:
        return "absent"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is float:
        if value != value:
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if type(value) is str:
        return repr(value)
    if type(value) is int and value.bit_length() > _MAX_INT_BITS:
        return f"<integer of {value.bit_length()} bits>"
    if type(value) is list:
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if type(value) is dict:
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)
