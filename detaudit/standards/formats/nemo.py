"""NeMo-RL metrics JSON: what its functional tests dump from TensorBoard and then check::

    {"train/loss": {"1": 0.59, "2": 0.57}, "train/reward": {"1": 0.1, "2": 0.3}}

NeMo-RL commits no golden file: ``tests/json_dump_tb_logs.py`` writes this JSON at run time and
``tests/check_metrics.py`` checks conditions written inline in the test script
(``data["train/loss"]["20"] < 0.4``), never a recorded value. So this format has no native
verdict to match: a standard in this shape is compared as detaudit compares (every point, the
same value bit for bit), with steps matched by number (the file keys them as text).

Written as ``json_dump_tb_logs.py`` writes: names sorted, steps in numeric order as string keys,
``json.dump(indent=2)``, no final newline; NaN and the infinities as Python's literals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detaudit.data.compare import PairDivergence, SeriesData, compare_series
from detaudit.data.values import format_value
from detaudit.errors import InputError
from detaudit.standards.formats.common import (
    Format,
    JsonLayout,
    Source,
    detect_layout,
    dump_json,
    int_step_key,
    is_number,
    require_int_steps,
    require_number,
)
from detaudit.standards.model import Standard

NAME = "nemo"
WRITER = JsonLayout(indent=2, item_separator=",", final_newline=False)


def detect(source: Source) -> bool:
    doc = source.doc
    if not isinstance(doc, dict) or not doc:
        return False
    return all(isinstance(entry, dict) and all(k.lstrip("-").isdigit() for k in entry) for entry in doc.values())


def load(path: Path, source: Source) -> Standard:
    series: dict[str, SeriesData] = {}
    for name, entry in source.doc.items():
        points = sorted(((int_step_key(path, name, k), v) for k, v in entry.items()), key=lambda p: p[0])
        for step, value in points:
            if not is_number(value):
                raise InputError(path, f"series {name!r}: step {step}: value {format_value(value)[:60]} is not a number")
        series[name] = SeriesData(name, "", [s for s, _ in points], [v for _, v in points])
    layout = detect_layout(source.text, source.spellings)
    native = {"format": NAME, "layout": layout.to_json()} if layout != WRITER else {}
    return Standard(series=series, format=NAME, native=native, path=path, source_text=source.text)


def render(standard: Standard, target: str) -> str:
    layout = JsonLayout.from_json(target, standard.layout if standard.native.get("format") == NAME else {}, WRITER)
    doc: dict[str, Any] = {}
    for name, data in sorted(standard.series.items()):
        require_int_steps(target, NAME, data)
        for step, value in data.points():
            require_number(target, NAME, name, step, value, nonfinite=True)
        doc[name] = {str(s): v for s, v in data.points()}
    return dump_json(doc, layout, allow_nan=True)


def compare(expected: SeriesData, native: dict[str, Any], actual: SeriesData | None) -> PairDivergence | None:
    return compare_series(expected, actual, 1, lenient_steps=True)


FORMAT = Format(
    name=NAME,
    title="NeMo-RL metrics JSON",
    shape='metrics of {"<step>": value} (NeMo-RL)',
    order=4,
    detect=detect,
    load=load,
    render=render,
    compare=compare,
    rule="exact, steps by number (NeMo-RL has no golden checker): every point in order, values of the same "
         "JSON type and bits (NaN matches NaN; 0.0 vs -0.0 and 1 vs 1.0 differ)",
    holds_step_types=False,
)
