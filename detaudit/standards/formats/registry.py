"""Which format a standard file is; reading and writing any standard through its format.

``load_any(path)`` detects the format from the content (never the file name):

* ``detaudit``   a JSON object with ``"schema": "detaudit/standard/1"``
* ``miles``      a JSON object with ``"metrics": {series: [[step, value], ...]}``
* ``megatron``   a JSON object of metrics, each ``{"start_step", "end_step", "step_interval", "values"}``
* ``nemo``       a JSON object of metrics, each ``{"<step>": value}``
* ``torchtitan`` text, one ``STEP VALUE`` per line

``render_as(standard, fmt)`` writes a standard in any of them, or raises ``InputError``
where the format cannot hold a value exactly.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.errors import InputError, UsageError
from detaudit.standards.formats import megatron, nemo, torchtitan
from detaudit.standards.standard import (
    Standard,
    load_standard,
    parse_json_document,
    read_standard_text,
    render_standard,
)
from detaudit.fileio import write_atomic

FORMATS = ("detaudit", "miles", "megatron", "torchtitan", "nemo")
# Formats that keep a sample of a run's points (every Nth step) and cannot hold a step's
# JSON type: verify compares the run at the standard's steps only, steps by numeric value.
SAMPLED_FORMATS = ("megatron", "torchtitan", "nemo")
DROPPED_NAN_KEY = "dropped_nan_series"  # miles meta: series left out by --drop-nan-series

_SHAPES = (
    '"schema" (detaudit), "metrics" (miles), metrics with "values" (Megatron-LM), '
    'metrics of {"<step>": value} (NeMo-RL), or `STEP VALUE` lines (TorchTitan)'
)


def detect_format(path: str | Path, text: str | None = None) -> str:
    """The format of a standard file, from its content; ``InputError`` when it is none of them."""
    path = Path(path)
    text = read_standard_text(path) if text is None else text
    return _detect(path, text)[0]


def _detect(path: Path, text: str) -> tuple[str, Any]:
    try:
        doc = parse_json_document(path, text)
    except InputError:
        if torchtitan.detect(text):
            return "torchtitan", None
        if text.lstrip().startswith(("{", "[")):
            raise
        raise InputError(path, f"not a standard: expected {_SHAPES}") from None
    if not isinstance(doc, dict):
        raise InputError(path, "a standard must be a JSON object")
    if "schema" in doc:
        return "detaudit", doc
    if isinstance(doc.get("metrics"), dict) and set(doc) <= {"meta", "metrics"}:
        return "miles", doc
    if megatron.detect(doc):
        return "megatron", doc
    if nemo.detect(doc):
        return "nemo", doc
    raise InputError(path, f"not a standard: expected {_SHAPES}")


def load_any(path: str | Path) -> Standard:
    """Read a standard in any known format (detected from the content)."""
    path = Path(path)
    text = read_standard_text(path)
    fmt, doc = _detect(path, text)
    if fmt in ("detaudit", "miles"):
        return load_standard(path)
    if fmt == "megatron":
        return megatron.load(path, doc)
    if fmt == "nemo":
        return nemo.load(path, doc)
    return torchtitan.load(path, text)


def render_as(standard: Standard, fmt: str, *, target: str | Path = "<output>", series: str | None = None) -> str:
    """The file text of ``standard`` in format ``fmt``; exact, or ``InputError`` saying what cannot be held."""
    target = str(target)
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if series is not None and fmt != "torchtitan":
        if series not in standard.series:
            raise InputError(target, f"no series {series!r} in the standard")
        standard = dataclasses.replace(standard, series={series: standard.series[series]})
    if fmt == "torchtitan":
        return torchtitan.render(standard, target, series)
    if fmt == "megatron":
        return megatron.render(standard, target)
    if fmt == "nemo":
        return nemo.render(standard, target)
    if standard.format in ("megatron",) and any(
        megatron.value_precision(standard, name) is not None for name in standard.series
    ):
        raise InputError(
            target,
            f"{fmt} standards are exact, and this Megatron file's values are rounded (value_precision); "
            "convert to megatron to keep the rounding",
        )
    if fmt == "miles":
        meta = dict(standard.meta) if standard.format == "miles" else {}
        return render_standard(dataclasses.replace(standard, format="miles", meta=meta))
    return render_standard(dataclasses.replace(standard, format="detaudit"))


def write_as(path: str | Path, standard: Standard, fmt: str, *, overwrite: bool, series: str | None = None) -> str:
    """Render and write atomically (never replacing an existing file without ``overwrite``)."""
    text = render_as(standard, fmt, target=path, series=series)
    write_atomic(path, text, overwrite=overwrite)
    return text


def _holds_nan(data: SeriesData) -> bool:
    return any(type(v) is float and math.isnan(v) for v in data.values)


def drop_nan_series(standard: Standard) -> list[str]:
    """Remove every series holding a NaN (for verifiers that compare with ``==``).

    Returns the dropped names and lists them in ``meta["dropped_nan_series"]``.
    """
    dropped = sorted(name for name, data in standard.series.items() if _holds_nan(data))
    for name in dropped:
        del standard.series[name]
    if dropped:
        standard.meta[DROPPED_NAN_KEY] = sorted(set(standard.meta.get(DROPPED_NAN_KEY, [])) | set(dropped))
    return dropped


def steps_are_lenient(standard: Standard) -> bool:
    """True where the file cannot hold a step's JSON type (1 vs 1.0): steps compare by value."""
    return standard.format == "miles" or standard.format in SAMPLED_FORMATS


def align_run_series(standard: Standard, name: str, actual: SeriesData) -> SeriesData:
    """The run's series as the standard's format compares it.

    Sampled formats (Megatron, NeMo-RL, TorchTitan) hold every Nth step: the run is compared
    at the standard's steps only (a standard step the run lacks still fails). A Megatron
    ``value_precision`` rounds the run's values to those decimals first.
    """
    if standard.format not in SAMPLED_FORMATS:
        return actual
    expected = standard.series[name]
    wanted = {s for s in expected.steps if type(s) in (int, float)}
    steps, values = [], []
    for step, value in zip(actual.steps, actual.values):
        if type(step) in (int, float) and step in wanted:
            steps.append(step)
            values.append(value)
    precision = megatron.value_precision(standard, name)
    if precision is not None:
        values = [round(v, precision) if type(v) is float and math.isfinite(v) else v for v in values]
    return SeriesData(actual.name, actual.step_key, steps, values)
