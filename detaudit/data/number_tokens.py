"""Number tokens detaudit refuses rather than misread.

Float tokens a 64-bit float cannot hold: JSON readers make ``1e400`` and ``2e400`` the same
infinity, and ``1e-400`` and ``2e-400`` the same 0.0, so two different numbers would compare
identical (a wrong green). No float64 writer prints such a token: a float's ``repr`` always
reads back as itself.

``exact_float`` is the ``parse_float`` of every JSON read of numbers (standards, the metrics
lines orjson refuses); ``refuse_underflow`` looks again at the few metrics lines where orjson
read a 0.0 from a token that could be a too-small number (``may_underflow``). Integers longer
than Python converts safely (4300 digits) are refused in words of this tool (``number_error``)."""

from __future__ import annotations

import json
import math
import re
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from detaudit.data.metrics_run import Series
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
# fraction 200 leading zeros or more. Text with neither cannot hold one.
_ZERO_RUN = b"0" * 200
# A float64 0.0 and -0.0 as stored in an ``array('d')``.
_ZERO = bytes(8)
_NEGATIVE_ZERO = bytes(7) + b"\x80" if sys.byteorder == "little" else b"\x80" + bytes(7)


# Where such a token may start: an exponent of 3 digits or more (a literal prefix: the regex
# engine searches for it fast), or a run of 200 zeros (bytes.find).
_LONG_EXPONENTS = (re.compile(rb"e-0*[0-9]{3}"), re.compile(rb"E-0*[0-9]{3}"))


def _candidates(text: bytes, end: int | None = None) -> list[int]:
    """Offsets in ``text`` (up to ``end``) of float tokens that may be too small for a float64."""
    end = len(text) if end is None else end
    found = [m.start() for pattern in _LONG_EXPONENTS for m in pattern.finditer(text, 0, end)]
    at = text.find(_ZERO_RUN, 0, end)
    if at >= 0:
        found.append(at)
    return sorted(found)


def may_underflow(raw: bytes) -> bool:
    """Whether a JSON line may hold a float token too small for a float64."""
    return bool(_candidates(raw))


def _float_zero_lines(series: dict[str, Series], zero_steps: list[int]) -> list[int] | None:
    """Sorted line indices where a value or (``zero_steps``) the step was read as a float 0.0: a
    zero token, or a too-small one; None past ``_DENSE`` of them. Float columns are searched as
    bytes (no Python object per value)."""
    found = set(zero_steps)
    for data in series.values():
        if len(found) > _DENSE:
            return None
        values, lines = data.values, data.lines
        if type(values) is array:
            raw = values.tobytes()
            for pattern in (_ZERO, _NEGATIVE_ZERO):
                at = raw.find(pattern)
                while at >= 0 and len(found) <= _DENSE:
                    if at % 8 == 0:
                        found.add(lines[at >> 3])
                        at += 8
                    else:
                        at += 1
                    at = raw.find(pattern, at)
        elif values.count(0.0):
            found.update(lines[i] for i, v in enumerate(values) if type(v) is float and v == 0)
    return sorted(found) if len(found) <= _DENSE else None


def refuse_underflow(path: Path, series: dict[str, Series], zero_steps: list[int],
                     checkpoints: list[tuple[int, int, int]], max_line_bytes: int) -> None:
    """``InputError`` naming the first line that holds a float token too small for a float64. Only
    the lines where a float 0.0 came out are read again (from the nearest of ``checkpoints``: line
    index, byte offset and line number where the reader's pass stood), and of those only the ones
    ``may_underflow`` flags are parsed again."""
    wanted = _float_zero_lines(series, zero_steps)
    if wanted is None:  # zeros on many lines (a column of 0.0): one pass over the bytes costs less
        _scan_blocks(path)
        return
    if not wanted:
        return
    marks = [index for index, _, _ in checkpoints]
    with open(path, "rb") as fh:
        index, lineno = -1, 0  # where the file stands: the next line read has this index + 1 (when not blank)
        for target in wanted:
            mark = bisect_right(marks, target) - 1
            if mark >= 0 and marks[mark] > index + 1:  # a checkpoint after where the file stands: jump there
                next_index, offset, lineno = checkpoints[mark]
                fh.seek(offset)
                index, lineno = next_index - 1, lineno - 1
            while True:
                raw = fh.readline(max_line_bytes + 1)
                lineno += 1
                if not raw:
                    return
                if raw.strip():
                    index += 1
                    if index == target:
                        break
            if may_underflow(raw):
                try:
                    json.loads(raw, parse_float=exact_float)
                except json.JSONDecodeError:
                    continue  # a cut-off last line, dropped by the reader with its warning
                except ValueError as exc:
                    raise InputError(path, str(exc), lineno) from None


_DENSE = 256  # more lines with a float 0.0 than this: search the whole file in blocks
_BLOCK = 1 << 23


def _scan_blocks(path: Path) -> None:
    """``refuse_underflow`` by one pass over the file in large blocks (whole lines each): the
    candidates' lines alone are parsed again; a refused one is numbered by counting newlines."""
    with open(path, "rb") as fh:
        offset, carry = 0, b""  # the file offset where ``carry`` (an unfinished line) begins
        while True:
            block = fh.read(_BLOCK)
            data = carry + block if carry else block
            if not data:
                return
            cut = data.rfind(b"\n") + 1 if block else len(data)
            for at in _candidates(data, cut):
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at, cut)
                try:
                    json.loads(data[start:end + 1 if end >= 0 else cut], parse_float=exact_float)
                except json.JSONDecodeError:
                    continue  # a cut-off last line, dropped by the reader with its warning
                except ValueError as exc:
                    raise InputError(path, str(exc), _line_at(path, offset + start)) from None
            if not block:
                return
            offset += cut
            carry = data[cut:]


def _line_at(path: Path, offset: int) -> int:
    """The 1-based line number of the line that starts at byte ``offset``."""
    lines = 1
    with open(path, "rb") as fh:
        while offset > 0:
            block = fh.read(min(_BLOCK, offset))
            if not block:
                break
            lines += block.count(b"\n")
            offset -= len(block)
    return lines
