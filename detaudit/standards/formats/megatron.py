"""Megatron-LM golden values (``tests/functional_tests/test_cases/**/golden_values_*.json``)::

    {"lm loss": {"start_step": 1, "end_step": 50, "step_interval": 1,
                 "values": {"1": 10.92, "2": "nan", ...}}}

A step whose value is the string ``"nan"`` is a point Megatron did not log: it is read as a
missing point (not a NaN value) and written back in place. Older files hold ``values`` as a
list from ``start_step`` every ``step_interval``; those are read, and written back as lists.
The optional per-metric ``"value_precision"`` (decimals the values were rounded to) is kept,
and ``verify`` rounds the run's values to it before the exact comparison. Top-level entries
that are not metrics (e.g. ``"iteration_timing_avg": 0.5``) are kept as they are.

What the format cannot hold, writing refuses: NaN (``"nan"`` means missing here), infinity,
non-numeric values, float steps, decreasing steps.
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

NAME = "megatron"
MISSING = "nan"
HEADER = ("start_step", "end_step", "step_interval", "value_precision")
META_KEY = "megatron"  # Standard.meta[META_KEY][series] = header fields, missing steps, layout
EXTRA_KEY = "megatron_extra"  # top-level entries that are not metrics


def detect(doc: Any) -> bool:
    metrics = [v for v in doc.values() if isinstance(v, dict)] if isinstance(doc, dict) else []
    return bool(metrics) and all("values" in v for v in metrics)


def _int_field(path: Path, name: str, entry: dict[str, Any], key: str) -> int | None:
    if key not in entry:
        return None
    value = entry[key]
    if type(value) is not int:
        raise InputError(path, f"series {name!r}: {key!r} must be an integer, got {value!r}")
    return value


def load(path: Path, doc: dict[str, Any]) -> Standard:
    series: dict[str, SeriesData] = {}
    headers: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    for name, entry in doc.items():
        if not isinstance(entry, dict):
            extra[name] = entry
            continue
        unknown = sorted(set(entry) - set(HEADER) - {"values"})
        if unknown:
            raise InputError(path, f"series {name!r}: unknown keys {', '.join(map(repr, unknown))}")
        header: dict[str, Any] = {k: _int_field(path, name, entry, k) for k in HEADER if k in entry}
        raw = entry["values"]
        if isinstance(raw, list):
            start, interval = header.get("start_step"), header.get("step_interval")
            if start is None or not interval:
                raise InputError(path, f"series {name!r}: a list of values needs start_step and a step_interval > 0")
            items = [(start + i * interval, v) for i, v in enumerate(raw)]
            header["layout"] = "list"
        elif isinstance(raw, dict):
            items = sorted(((int_step_key(path, name, k), v) for k, v in raw.items()), key=lambda p: p[0])
        else:
            raise InputError(path, f"series {name!r}: \"values\" must be an object of step -> value")
        steps, values, missing = [], [], []
        for step, value in items:
            if value == MISSING:
                missing.append(step)
                continue
            if type(value) not in (int, float):
                raise InputError(path, f"series {name!r}: step {step}: value {value!r} is not a number or \"nan\"")
            steps.append(step)
            values.append(value)
        if missing:
            header["missing"] = missing
        headers[name] = header
        series[name] = SeriesData(name, "", steps, values)
    if not series:
        raise InputError(path, "no metrics: expected {\"<metric>\": {\"start_step\", \"end_step\", \"step_interval\", \"values\"}}")
    meta: dict[str, Any] = {META_KEY: headers}
    if extra:
        meta[EXTRA_KEY] = extra
    return Standard(series=series, format=NAME, meta=meta, path=path)


def _interval(steps: list[int]) -> int:
    from math import gcd

    step = 0
    for a, b in zip(steps, steps[1:]):
        step = gcd(step, b - a)
    return step or 1


def render(standard: Standard, target: str) -> str:
    headers = standard.meta.get(META_KEY, {}) if standard.format == NAME else {}
    doc: dict[str, Any] = {}
    for name, data in sorted(standard.series.items()):
        require_int_steps(target, NAME, data)
        for step, value in zip(data.steps, data.values):
            require_number(target, NAME, name, step, value, nonfinite=False)
        header = dict(headers.get(name, {}))
        missing = list(header.pop("missing", []))
        layout = header.pop("layout", "dict")
        points = dict(zip(data.steps, data.values))
        for step in missing:
            if step in points:
                raise InputError(target, f"series {name!r}: step {step} is both a point and missing")
            points[step] = MISSING
        ordered = sorted(points)
        entry: dict[str, Any] = {
            "start_step": header.get("start_step", ordered[0] if ordered else 0),
            "end_step": header.get("end_step", ordered[-1] if ordered else 0),
            "step_interval": header.get("step_interval", _interval(ordered)),
        }
        if "value_precision" in header:
            entry["value_precision"] = header["value_precision"]
        if layout == "list":
            start, interval = entry["start_step"], entry["step_interval"]
            if ordered != list(range(start, start + interval * len(ordered), interval)):
                raise InputError(target, f"series {name!r}: steps no longer fit start_step {start} every {interval}")
            entry["values"] = [points[s] for s in ordered]
        else:
            entry["values"] = {str(s): points[s] for s in ordered}
        doc[name] = entry
    if standard.format == NAME:
        for key, value in standard.meta.get(EXTRA_KEY, {}).items():
            doc.setdefault(key, value)
    # Megatron's own files: 4-space indent, header before values; floats by repr (exact).
    try:
        return json.dumps(doc, indent=4, allow_nan=False, ensure_ascii=False) + "\n"
    except ValueError as exc:  # a non-finite number among the kept top-level entries
        raise InputError(target, f"{NAME} cannot hold a top-level entry: {exc}") from None


def value_precision(standard: Standard, name: str) -> int | None:
    """The decimals a Megatron series was rounded to, if its file says so."""
    if standard.format != NAME:
        return None
    value = standard.meta.get(META_KEY, {}).get(name, {}).get("value_precision")
    return value if type(value) is int else None
