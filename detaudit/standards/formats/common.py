"""Checks shared by the formats that key points by integer step (Megatron, NeMo-RL, TorchTitan)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.data.values import format_value
from detaudit.errors import InputError


def int_step_key(path: Path, series: str, key: Any) -> int:
    """A JSON object key that must be the decimal form of an integer step ("12", not "12.0")."""
    if not isinstance(key, str):
        raise InputError(path, f"series {series!r}: step {key!r} is not a string key")
    try:
        step = int(key)
    except ValueError:
        raise InputError(path, f"series {series!r}: step {key!r} is not an integer") from None
    if str(step) != key:
        raise InputError(path, f"series {series!r}: step {key!r} is not in canonical integer form")
    return step


def require_int_steps(target: str, fmt: str, data: SeriesData) -> None:
    """Fail unless every step is a plain int, increasing (the format keys points by step, in order)."""
    previous: int | None = None
    for step in data.steps:
        if type(step) is not int:
            raise InputError(
                target,
                f"{fmt} cannot hold series {data.name!r} exactly: step {format_value(step)} is a "
                f"{type(step).__name__}, and {fmt} keys points by integer step",
            )
        if previous is not None and step <= previous:
            raise InputError(
                target, f"{fmt} cannot hold series {data.name!r}: step {step} follows step {previous} (steps must increase)"
            )
        previous = step


def require_number(target: str, fmt: str, name: str, step: Any, value: Any, *, nonfinite: bool) -> None:
    """Fail unless ``value`` is an int or float the format can write (``nonfinite``: NaN/±inf too)."""
    if type(value) not in (int, float):
        raise InputError(
            target,
            f"{fmt} cannot hold series {name!r} at step {format_value(step)}: "
            f"value {format_value(value)} is not a number",
        )
    if not nonfinite and type(value) is float and not math.isfinite(value):
        why = (
            "it writes \"nan\" for a missing point, so a NaN value would read back as missing"
            if value != value
            else "JSON has no literal for infinity"
        )
        raise InputError(
            target, f"{fmt} cannot hold series {name!r} at step {format_value(step)}: value {format_value(value)} ({why})"
        )
