"""Bit-level float helpers and a JSON encoding of metric values that any parser reads.

Finite floats are written with ``repr`` (shortest string that round-trips to the same
binary64), so they stay plain JSON numbers. NaN and the infinities, which strict JSON has
no literal for, become ``{"float": "NaN"}``, ``{"float": "Infinity"}``,
``{"float": "-Infinity"}``: an object, so a real string value "NaN" stays distinguishable.
"""

from __future__ import annotations

import math
import struct
from typing import Any

_PACK = struct.Struct("<d")
_INT = struct.Struct("<q")

NONFINITE_KEY = "float"


def _ordered(x: float) -> int:
    # Map binary64 onto a line of integers where adjacent floats differ by 1.
    i = _INT.unpack(_PACK.pack(x))[0]
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)


def ulp_distance(a: float, b: float) -> int | None:
    """How many representable doubles lie between ``a`` and ``b`` (None for NaN)."""
    if math.isnan(a) or math.isnan(b):
        return None
    return abs(_ordered(a) - _ordered(b))


def same_value(a: Any, b: Any) -> bool:
    """Exact match: same JSON type and, for floats, the same bits (NaN == NaN, 0.0 != -0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) or (a != a and b != b)
    return a == b


def encode_value(value: Any) -> Any:
    """A JSON-safe form of a metric value or step (see module doc)."""
    if type(value) is float and not math.isfinite(value):
        if value != value:
            return {NONFINITE_KEY: "NaN"}
        return {NONFINITE_KEY: "Infinity" if value > 0 else "-Infinity"}
    return value


_DECODE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``; also accepts bare NaN/Infinity that Python's json parsed."""
    if type(value) is dict and len(value) == 1 and NONFINITE_KEY in value:
        try:
            return _DECODE[value[NONFINITE_KEY]]
        except (KeyError, TypeError):
            raise ValueError(f"unknown non-finite float {value[NONFINITE_KEY]!r}") from None
    return value


def format_value(value: Any) -> str:
    """Human-readable, exact: floats by repr (round-trips), others as JSON would show them."""
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
    return str(value)
