"""Number tokens detaudit refuses rather than misread. Float tokens a 64-bit float cannot hold: JSON readers make ``1e400``
and ``2e400`` the same infinity, and ``1e-400`` and ``2e-400`` the same 0.0, so two different
numbers would compare identical (a wrong green). No float64 writer prints such a token: a
float's ``repr`` always reads back as itself.

``exact_float`` is the ``parse_float`` of every JSON read of numbers (standards, the metrics
lines orjson refuses); ``refuse_underflow`` looks again at the few metrics lines where orjson
read a 0.0 from a token that could be a too-small number (``may_underflow``). Integers longer
than Python converts safely (4300 digits) are refused in words of this tool (``number_error``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from detaudit.data.metrics_run import Series, line_number
from detaudit.errors import InputError


def exact_float(token: str) -> float:
    """``float(token)``; ``ValueError`` when the token is beyond a float64's range or too small
    for it (a nonzero number that would read as 0.0)."""
    value = float(token)
    if math.isinf(value):
        raise ValueError(f"number {token} is beyond the range of a 64-bit float (it would read as infinity)")
    if value == 0.0 and any(c in "123456789" for c in token.partition("e")[0].partition("E")[0]):
        raise ValueError(f"number {token} is too small for a 64-bit float (it would read as 0.0, as would other "
                         "numbers)")
    return value


_INT_LIMIT = re.compile(r"Exceeds the limit \((\d+) digits\) for integer string conversion.*?has (\d+) digits")


def number_error(exc: Exception) -> str:
    """The words for a ValueError from reading JSON numbers; Python's own advice on its
    integer-conversion limit (call ``sys.set_int_max_str_digits``) is not the user's to follow."""
    found = _INT_LIMIT.search(str(exc))
    if found is None:
        return str(exc)
    return (f"an integer of {found.group(2)} digits: detaudit reads integers of up to {found.group(1)} digits "
            "(Python's limit on converting them safely)")


# A nonzero number reads as 0.0 only below ~2.5e-324: its exponent has 3 digits or more, or its
# fraction 200 leading zeros or more. A line with neither cannot hold one.
_ZERO_RUN = b"0" * 200


def may_underflow(raw: bytes) -> bool:
    """Whether a JSON line may hold a float token too small for a float64 (a cheap test on bytes)."""
    if _ZERO_RUN in raw:
        return True
    for marker in (b"e-", b"E-"):
        at = raw.find(marker)
        while at >= 0:
            end = at + 2
            while end < len(raw) and raw[end] == 0x30:  # leading zeros of the exponent
                end += 1
            digits = end
            while digits < len(raw) and 0x30 <= raw[digits] <= 0x39:
                digits += 1
            if digits - end >= 3:
                return True
            at = raw.find(marker, digits)
    return False


def _zero_lines(series: dict[str, Series], line_steps: list[Any]) -> set[int]:
    """Line indices where a value or the step read as 0 (a zero token, or a too-small one)."""
    found: set[int] = set()
    for data in series.values():
        values = data.values
        if not values.count(0.0):  # one C pass; 0 == 0.0, so integer zeros come along (harmless)
            continue
        at = values.index(0.0)
        while True:
            found.add(data.lines[at])
            try:
                at = values.index(0.0, at + 1)
            except ValueError:
                break
    if line_steps.count(0.0):
        found.update(i for i, step in enumerate(line_steps) if step == 0)
    return found


def refuse_underflow(path: Path, series: dict[str, Series], line_steps: list[Any],
                     line_offsets: list[tuple[int, int]], max_line_bytes: int) -> None:
    """``InputError`` naming the first line that holds a float token too small for a float64. Only
    lines where a 0 came out are read again, and of those only the ones ``may_underflow`` flags
    are parsed again."""
    zeros = _zero_lines(series, line_steps)
    if not zeros:
        return
    wanted = sorted(line_number(line_offsets, index) for index in zeros)
    position = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(max_line_bytes + 1), b""), 1):
            if lineno != wanted[position]:
                continue
            if may_underflow(raw):
                try:
                    json.loads(raw, parse_float=exact_float)
                except ValueError as exc:
                    raise InputError(path, str(exc), lineno) from None
            position += 1
            if position == len(wanted):
                return

