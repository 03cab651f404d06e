"""Integers beyond 64 bits in a metrics file, read exactly: orjson reads such an integer as the
nearest float, so the few lines where a float of at least 2**63 came out are read again with
Python's json, which keeps every integer exact (``exact_integers``)."""

from __future__ import annotations

import json
import re
import sys
from array import array
from pathlib import Path
from typing import Any

from detaudit.data.metrics_run import Series, line_number
from detaudit.errors import InputError

# orjson reads an integer outside [-2**63, 2**64) as the nearest float, whose size is at least this.
INT64_EDGE = 2.0**63
# Byte of a float64 that holds its sign and the top 7 bits of its exponent, and a table marking
# the values of that byte where |x| >= 2**49 (a prefilter for "|x| >= 2**63", NaN and inf included).
_HIGH_BYTE = 7 if sys.byteorder == "little" else 0
_LARGE_EXPONENT = bytes(1 if (b & 0x7F) >= 0x43 else 0 for b in range(256))


def _big_float(value: Any) -> bool:
    """A finite float of at least 2**63: what orjson makes of an integer beyond 64 bits."""
    return type(value) is float and abs(value) >= INT64_EDGE and value - value == 0


def _holds_big_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item.values())
        elif _big_float(item):
            return True
    return False


def _big_positions(values: array | list) -> list[int]:
    """Positions of a column whose value is, or holds, a finite float of at least 2**63."""
    if type(values) is array:
        if not values:
            return []
        # One C pass over the exponent bytes; only the (rare) flagged floats are looked at in Python.
        flags = values.tobytes()[_HIGH_BYTE::8].translate(_LARGE_EXPONENT)
        found = []
        at = flags.find(1)
        while at >= 0:
            if _big_float(values[at]):
                found.append(at)
            at = flags.find(1, at + 1)
        return found
    types = set(map(type, values))
    if float not in types and list not in types and dict not in types:
        return []
    return [i for i, v in enumerate(values) if _big_float(v) or type(v) in (list, dict) and _holds_big_float(v)]


def exact_integers(path: Path, series: dict[str, Series], line_steps: list[Any], big_steps: list[tuple[int, str]],
                   line_offsets: list[tuple[int, int]], max_line_bytes: int) -> None:
    """Put back the integers orjson read as floats: the lines holding a float of at least 2**63
    (rare: no metric is near 9.2e18) are read again with Python's json, which keeps every integer
    exact, and their steps and values replaced by what it read."""
    wanted: dict[int, list[tuple[Series, int]]] = {index: [] for index, _ in big_steps}
    for data in series.values():
        for position in _big_positions(data.values):
            wanted.setdefault(data.lines[position], []).append((data, position))
    if not wanted:
        return
    exact = _read_lines_exactly(path, {line_number(line_offsets, index): index for index in wanted}, max_line_bytes)
    for index, step_field in big_steps:
        if exact[index] is not None:
            line_steps[index] = exact[index][step_field]
    for index, places in wanted.items():
        if exact[index] is None:
            continue
        for data, position in places:
            value = exact[index][data.name]
            if type(data.values) is array:
                if type(value) is float:
                    continue  # a float token after all (1e19): the same float
                data.values = data.values.tolist()
            data.values[position] = value


# An integer token of 19 digits or more (2**63 has 19): only such a token can be one orjson rounded.
_LONG_INTEGER = re.compile(rb"(?<![0-9.eE+-])-?[0-9]{19,}(?![0-9.eE])")


def _read_lines_exactly(path: Path, wanted: dict[int, int], max_line_bytes: int) -> dict[int, Any]:
    """line index -> the line parsed by Python's json, for the file line numbers in ``wanted``; None
    for a line without a long integer token (its big floats were float tokens: 1e19, 1.2e+20)."""
    found: dict[int, Any] = {}
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(max_line_bytes + 1), b""), 1):
            index = wanted.get(lineno)
            if index is not None:
                found[index] = json.loads(raw) if _LONG_INTEGER.search(raw) else None
                if len(found) == len(wanted):
                    break
    if len(found) != len(wanted):
        raise InputError(path, "changed while it was read (lines holding integers beyond 64 bits are read twice)")
    return found
