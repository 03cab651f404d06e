"""TorchTitan loss files (``tests/assets/losses/*.txt``): one ``step value`` per line::

    1 8.048324584960938
    2 7.751155376434326

One series (read as ``loss``). Values are written as Python writes them (``repr``: exact;
``nan``, ``inf``, ``-inf`` included); a token without ``.``, exponent or letters reads as an int,
as Python wrote an int. A standard with more than one series needs ``series=`` to pick one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.errors import InputError
from detaudit.standards.formats.common import require_int_steps, require_number
from detaudit.standards.standard import Standard

NAME = "torchtitan"
SERIES = "loss"
_LINE = re.compile(r"^\s*(-?\d+)\s+(\S+)\s*$")
_INT = re.compile(r"^-?\d+$")


def detect(text: str) -> bool:
    # The first line decides; a later bad line is then reported with its line number.
    first = next((line for line in text.splitlines() if line.strip()), None)
    return first is not None and _LINE.match(first) is not None


def _value(token: str) -> Any:
    if _INT.match(token):
        return int(token)
    return float(token)  # ValueError for anything that is not a float literal


def load(path: Path, text: str) -> Standard:
    steps: list[int] = []
    values: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise InputError(path, f"expected `STEP VALUE` (integer step, number), got {line.strip()[:60]!r}", lineno)
        try:
            value = _value(match.group(2))
        except ValueError:
            raise InputError(path, f"value {match.group(2)!r} is not a number", lineno) from None
        step = int(match.group(1))
        if steps and step <= steps[-1]:
            raise InputError(path, f"step {step} follows step {steps[-1]} (steps must increase)", lineno)
        steps.append(step)
        values.append(value)
    if not steps:
        raise InputError(path, "empty loss file")
    return Standard(series={SERIES: SeriesData(SERIES, "", steps, values)}, format=NAME, path=path)


def render(standard: Standard, target: str, series: str | None = None) -> str:
    names = sorted(standard.series)
    if series is None:
        if len(names) != 1:
            raise InputError(
                target,
                f"{NAME} holds one series and this standard has {len(names)} "
                f"({', '.join(names[:8])}{', ...' if len(names) > 8 else ''}); pick one with --series",
            )
        series = names[0]
    if series not in standard.series:
        raise InputError(target, f"no series {series!r} in the standard")
    data = standard.series[series]
    require_int_steps(target, NAME, data)
    lines = []
    for step, value in zip(data.steps, data.values):
        require_number(target, NAME, series, step, value, nonfinite=True)
        lines.append(f"{step} {value!r}\n")
    return "".join(lines)
