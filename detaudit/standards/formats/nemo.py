"""NeMo-RL metrics JSON (what its functional tests check with ``check_metrics.py``)::

    {"train/loss": {"1": 0.59, "2": 0.57}, "train/reward": {"1": 0.1, "2": 0.3}}

Steps are integer keys. Python's ``json`` writes and reads NaN and the infinities as
``NaN`` / ``Infinity`` literals, so those are held; non-numeric values and float steps are not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.errors import InputError
from detaudit.standards.formats.common import (
    int_step_key,
    require_int_steps,
    require_number,
)
from detaudit.standards.standard import Standard

NAME = "nemo"


def detect(doc: Any) -> bool:
    if not isinstance(doc, dict) or not doc:
        return False
    for entry in doc.values():
        if not isinstance(entry, dict) or not all(isinstance(k, str) and k.lstrip("-").isdigit() for k in entry):
            return False
    return True


def load(path: Path, doc: dict[str, Any]) -> Standard:
    series: dict[str, SeriesData] = {}
    for name, entry in doc.items():
        if not isinstance(entry, dict):
            raise InputError(path, f"series {name!r}: expected an object of step -> value")
        points = sorted(((int_step_key(path, name, k), v) for k, v in entry.items()), key=lambda p: p[0])
        for step, value in points:
            if type(value) not in (int, float):
                raise InputError(path, f"series {name!r}: step {step}: value {value!r} is not a number")
        series[name] = SeriesData(name, "", [s for s, _ in points], [v for _, v in points])
    return Standard(series=series, format=NAME, path=path)


def render(standard: Standard, target: str) -> str:
    doc: dict[str, Any] = {}
    for name, data in sorted(standard.series.items()):
        require_int_steps(target, NAME, data)
        for step, value in zip(data.steps, data.values):
            require_number(target, NAME, name, step, value, nonfinite=True)
        doc[name] = {str(s): v for s, v in zip(data.steps, data.values)}
    return json.dumps(doc, indent=4, allow_nan=True, ensure_ascii=False) + "\n"
