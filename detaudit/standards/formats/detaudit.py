"""detaudit's own standard file (``"schema": "detaudit/standard/1"``)::

    {"schema": "detaudit/standard/1", "name": ..., "runner": {...}, "recorded": {...},
     "excluded": {...}, "dropped": {...},
     "series": {"train/loss": {"step_key": "train/step", "points": [[1.0, 0.25], ...]}}}

Keys sorted, one point per line, so that a change reads well in review. Floats are written
with ``repr`` (bit-exact round trip); NaN and the infinities as ``{"float": "NaN"}`` etc. (see
``detaudit.data.values``) so any JSON parser reads the file.

It can hold everything another format's file holds, so a conversion to it and back is exact:
``comparison`` (the rule of the format it came from; absent: exact), ``meta`` (miles'),
``native`` (what a foreign format carries beyond points: Megatron-LM's headers, "nan" cells and
list layout, top-level entries, the byte layout) and ``rename`` (run series -> standard series,
applied by verify). Each of those is written only when it is not empty, so a standard recorded
by detaudit has the same bytes as before they existed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from detaudit.data.compare import PairDivergence, SeriesData, compare_series
from detaudit.data.values import (
    MAX_DEPTH,
    NONFINITE_KEY,
    contains_encoded_nonfinite,
    decode_value,
    depth,
    encode_value,
)
from detaudit.errors import InputError
from detaudit.runner_class import RunnerClass
from detaudit.standards.formats.common import Format, Source
from detaudit.standards.model import Standard

NAME = "detaudit"
SCHEMA = "detaudit/standard/1"
_KEYS = ("schema", "name", "runner", "recorded", "excluded", "dropped", "series",
         "comparison", "meta", "native", "rename")


def detect(source: Source) -> bool:
    return isinstance(source.doc, dict) and "schema" in source.doc


# --- reading -------------------------------------------------------------------------


def points(path: Path, name: str, raw: Any, *, decode: bool = True) -> tuple[list[Any], list[Any]]:
    """``[[step, value], ...]`` of one series (also miles'); ``decode``: ``{"float": "NaN"}`` is a NaN
    (detaudit's files; miles' keep it as the object its checker sees)."""
    if not isinstance(raw, list):
        raise InputError(path, f"series {name!r}: points must be a list of [step, value]")
    steps, values = [], []
    for i, point in enumerate(raw):
        if not isinstance(point, list) or len(point) != 2:
            raise InputError(path, f"series {name!r}: point {i} must be [step, value]")
        if depth(point) > MAX_DEPTH:
            raise InputError(path, f"series {name!r}: point {i} is nested deeper than {MAX_DEPTH} levels")
        if not decode:
            steps.append(point[0])
            values.append(point[1])
            continue
        try:
            steps.append(decode_value(point[0]))
            values.append(decode_value(point[1]))
        except ValueError as exc:
            raise InputError(path, f"series {name!r}: point {i}: {exc}") from None
    return steps, values


def _object(path: Path, doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise InputError(path, f'"{key}" must be an object, got {type(value).__name__}')
    return value


def check_string_map(path: Path | str, where: str, value: Any) -> dict[str, str]:
    """An object of non-empty strings to strings (excluded series -> reason)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()):
        raise InputError(path, f"{where} must be an object of series names to strings")
    return value


def check_meta(path: Path | str, meta: dict[str, Any]) -> None:
    dropped = meta.get("dropped_nan_series")
    if dropped is not None and not (isinstance(dropped, list) and all(isinstance(s, str) for s in dropped)):
        raise InputError(path, f"meta.dropped_nan_series must be a list of series names, got {type(dropped).__name__}")


def _check_fields(path: Path, doc: dict[str, Any]) -> None:
    unknown = sorted(set(doc) - set(_KEYS))
    if unknown:
        raise InputError(path, f"unknown key {unknown[0]!r} in a detaudit standard (known: {', '.join(sorted(_KEYS))})")
    name = doc.get("name")
    if name is not None and not isinstance(name, str):
        raise InputError(path, f'"name" must be a string, got {type(name).__name__}')
    for key in ("runner", "recorded", "excluded", "dropped", "meta", "native"):
        _object(path, doc, key)
    if "class" in doc.get("runner", {}):
        RunnerClass.of(doc["runner"]["class"], path, "runner.class")  # a class names files: checked here
    excluded = doc.get("excluded", {})
    if "series" in excluded:
        check_string_map(path, "excluded.series", excluded["series"])
    patterns = excluded.get("patterns", {})
    if not isinstance(patterns, dict) or not all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in patterns.values()):
        raise InputError(path, "excluded.patterns must be an object of lists of glob strings")
    for series, why in doc.get("dropped", {}).items():
        if not isinstance(why, dict):
            raise InputError(path, f"dropped.{series} must be an object (kind, step, disagreeing_runs)")
    check_meta(path, doc.get("meta", {}))
    comparison = doc.get("comparison")
    if comparison is not None and not isinstance(comparison, str):
        raise InputError(path, f'"comparison" must be a format name, got {type(comparison).__name__}')
    if "rename" in doc:
        from detaudit.data.card import check_rename  # deferred: the card parser (tomllib: ~10 ms) for a rename only

        check_rename(path, "rename", doc["rename"])  # the same rule as a card's rename


def _decoded(path: Path, key: str, value: Any) -> Any:
    # meta and native are written with non-finite floats encoded, as points are
    try:
        return decode_value(value)
    except ValueError as exc:
        raise InputError(path, f"{key}: {exc}") from None


def load(path: Path, source: Source) -> Standard:
    doc = source.doc
    if doc.get("schema") != SCHEMA:
        raise InputError(path, f"unsupported standard schema {doc['schema']!r} (expected {SCHEMA!r})")
    _check_fields(path, doc)
    series_doc = doc.get("series")
    if not isinstance(series_doc, dict):
        raise InputError(path, '"series" must be an object of series')
    series: dict[str, SeriesData] = {}
    for name, entry in series_doc.items():
        if not isinstance(entry, dict) or "points" not in entry:
            raise InputError(path, f"series {name!r}: expected an object with \"step_key\" and \"points\"")
        step_key = entry.get("step_key", "")
        if not isinstance(step_key, str):
            raise InputError(path, f"series {name!r}: step_key must be a string")
        steps, values = points(path, name, entry["points"])
        series[name] = SeriesData(name, step_key, steps, values)
    return Standard(
        series=series,
        format=NAME,
        name=doc.get("name"),
        runner=doc.get("runner", {}),
        recorded=doc.get("recorded", {}),
        excluded=doc.get("excluded", {}),
        dropped=doc.get("dropped", {}),
        meta=_decoded(path, "meta", doc.get("meta", {})),
        comparison=doc.get("comparison"),
        rename=doc.get("rename", {}),
        native=_decoded(path, "native", doc.get("native", {})),
        path=path,
        source_text=source.text,
    )


# --- writing -------------------------------------------------------------------------


def series_document(series: dict[str, SeriesData]) -> dict[str, Any]:
    """The ``series`` section: per name its step key and [step, value] points."""
    return {
        name: {
            "step_key": data.step_key,
            "points": [[encode_value(s), encode_value(v)] for s, v in data.points()],
        }
        for name, data in sorted(series.items())
    }


def render(standard: Standard, target: str) -> str:
    """The file text; the same input gives the same bytes."""
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "name": standard.name,
        "runner": standard.runner,
        "recorded": standard.recorded,
        "excluded": standard.excluded,
        "series": series_document(standard.series),
    }
    if standard.comparison not in (None, NAME):
        doc["comparison"] = standard.comparison
    for key in ("dropped", "meta", "native", "rename"):
        if key in ("meta", "native") and contains_encoded_nonfinite(getattr(standard, key)):
            raise InputError(target, f"{NAME} cannot hold this {key}: it uses the {{\"{NONFINITE_KEY}\": ...}} shape "
                                     "that detaudit files reserve for NaN and infinity")
        if getattr(standard, key):
            doc[key] = encode_value(getattr(standard, key)) if key in ("meta", "native") else getattr(standard, key)
    try:
        return dump(doc, allow_nan=False) + "\n"
    except ValueError as exc:
        raise InputError(target, f"{NAME} cannot write a field: {exc}") from None


def _compact(value: Any, allow_nan: bool) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), allow_nan=allow_nan, ensure_ascii=False)


def dump(value: Any, allow_nan: bool, level: int = 0) -> str:
    """Sorted keys and one list element per line, but a point ([step, value]) or a list of
    scalars stays on one line: diffs of a re-recorded standard then show the points."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, dict) and value and not _is_encoded_scalar(value):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dump(value[k], allow_nan, level + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and any(isinstance(x, (list, dict)) and not _is_encoded_scalar(x) for x in value):
        items = [inner + (_compact(x, allow_nan) if _is_point(x) else dump(x, allow_nan, level + 1)) for x in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _compact(value, allow_nan)


def _is_encoded_scalar(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and NONFINITE_KEY in value


def _is_point(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(x, (list, dict)) or _is_encoded_scalar(x) for x in value)


# --- comparing -------------------------------------------------------------------------


def compare(expected: SeriesData, native: dict[str, Any], actual: SeriesData | None) -> PairDivergence | None:
    """Exact: every point in order, steps of the same JSON type and value, values of the same type
    and bits (NaN matches NaN; 0.0 vs -0.0 and 1 vs 1.0 differ)."""
    return compare_series(expected, actual, 1, lenient_steps=False)


FORMAT = Format(
    name=NAME,
    title="detaudit standard",
    shape='"schema" (detaudit)',
    order=0,
    detect=detect,
    load=load,
    render=render,
    compare=compare,
    rule="exact: every point in order; steps and values of the same JSON type, floats with the same bits "
         "(NaN matches NaN; 0.0 vs -0.0 and 1 vs 1.0 differ)",
    holds_step_types=True,
)
