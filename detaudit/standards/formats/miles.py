"""miles_diffusion e2e standards (``tests/ci/fixtures/e2e_standards/*.json``)::

    {"meta": {"commit": "...", "source": "..."}, "metrics": {"<series>": [[step, value], ...]}}

Written as miles' ``_write_standard`` writes them: ``json.dumps(indent=2, sort_keys=True)`` and
a final newline (every step and value on its own line; NaN as the bare ``NaN`` literal). Steps
keep their JSON type (rollout steps int, train steps float). ``meta`` is kept in every
conversion that can hold it (detaudit's ``meta``); miles' checker does not read it.

Verdict (miles' ``check_or_update``, ``_values_match``): per series the same number of points;
point by point the same step (Python ``==``: 1 matches 1.0) and the same value (``==``: 768
matches 768.0, 0.0 matches -0.0); a NaN matches only a NaN.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from detaudit.data.compare import ABSENT, PairDivergence, SeriesData, classify, first_divergence
from detaudit.errors import InputError
from detaudit.standards.formats.common import Format, JsonLayout, Source, detect_layout, dump_json, is_number
from detaudit.standards.formats.detaudit import check_meta, points
from detaudit.standards.model import Standard

NAME = "miles"
# miles' writer: json.dumps(payload, indent=2, sort_keys=True) + "\n"
WRITER = JsonLayout(indent=2, item_separator=",", final_newline=True)


def detect(source: Source) -> bool:
    doc = source.doc
    return isinstance(doc, dict) and isinstance(doc.get("metrics"), dict) and set(doc) <= {"meta", "metrics"}


def load(path: Path, source: Source) -> Standard:
    doc = source.doc
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(path, '"meta" must be an object')
    check_meta(path, meta)
    series = {}
    for name, raw in doc["metrics"].items():
        steps, values = points(path, name, raw, decode=False)  # miles reads its file with json.loads alone
        series[name] = SeriesData(name, "", steps, values)
    native: dict[str, Any] = {}
    layout = detect_layout(source.text, source.spellings)
    if layout != WRITER or "meta" not in doc:
        native = {"format": NAME, "layout": {**layout.to_json(), **({"meta": False} if "meta" not in doc else {})}}
    return Standard(series=series, format=NAME, meta=meta, native=native, path=path, source_text=source.text)


def render(standard: Standard, target: str) -> str:
    layout_doc = standard.layout if standard.native.get("format") == NAME else {}
    layout = JsonLayout.from_json(target, layout_doc, WRITER)
    doc: dict[str, Any] = {}
    if standard.meta or layout_doc.get("meta", True):
        doc["meta"] = _sorted(standard.meta)
    doc["metrics"] = {name: [[s, v] for s, v in data.points()]
                      for name, data in sorted(standard.series.items())}
    return dump_json(doc, layout, allow_nan=True)


def _sorted(value: Any) -> Any:
    # sort_keys=True, at every level
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _isnan(value: Any) -> bool | None:
    """``math.isnan(value)`` as miles calls it; None where that raises (a value that is no number,
    an integer beyond float range): miles' check then fails with the error, whatever the run."""
    try:
        return math.isnan(value)
    except (TypeError, OverflowError):
        return None


def values_match(expected: Any, actual: Any) -> bool:
    """miles' ``_values_match(got, want)`` without a tolerance: ``math.isnan`` of both (an error,
    so a failure, for anything that is no number: ``{"float": "NaN"}`` is an object to miles, not
    a NaN), a NaN matches only a NaN, else Python ``==``."""
    got, want = _isnan(actual), _isnan(expected)
    if got is None or want is None:
        return False
    if got or want:
        return got and want
    return bool(expected == actual)


def _same_step(a: Any, b: Any) -> bool:
    return bool(a == b) if is_number(a) and is_number(b) else (type(a) is type(b) and a == b)


def compare(expected: SeriesData, native: dict[str, Any], actual: SeriesData | None) -> PairDivergence | None:
    if actual is None:
        return PairDivergence(1, 0, "missing", expected.steps[0] if len(expected) else ABSENT,
                              expected.values[0] if len(expected) else ABSENT, ABSENT, len_a=len(expected))
    return first_divergence(expected, actual, _same_step, values_match, _kind)


def _kind(expected: Any, actual: Any) -> str:
    return "not a number" if _isnan(expected) is None or _isnan(actual) is None else classify(expected, actual)


FORMAT = Format(
    name=NAME,
    title="miles_diffusion e2e standard",
    shape='"metrics" (miles)',
    order=1,
    detect=detect,
    load=load,
    render=render,
    compare=compare,
    rule="miles' registry: the same number of points; point by point the same step and value by Python == "
         "(1 matches 1.0, 0.0 matches -0.0); a NaN matches only a NaN; a value that is no number fails "
         "(its math.isnan raises: {\"float\": \"NaN\"} is an object there)",
    holds_step_types=True,
)
