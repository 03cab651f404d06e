"""Megatron-LM golden values (``tests/functional_tests/test_cases/**/golden_values_*.json``)::

    {"lm loss": {"start_step": 1, "end_step": 50, "step_interval": 5,
                 "values": {"1": 10.92705, "5": 10.8592, "10": "nan"}}}

What a file holds, all of it kept (a conversion to detaudit and back gives the same bytes):

* per metric ``start_step``, ``end_step``, ``step_interval`` (Megatron-LM's ``GoldenValueMetric``
  requires them; its current checker does not use them) and ``values``;
* ``"nan"``: a step on the extractor's grid that TensorBoard had no value for. It is not a NaN
  (Megatron's extractor refuses NaN); the run must not have a value there either;
* list-shaped ``values`` (the layout before 2025): item *i* is the run's (``start_step`` + *i* x
  ``step_interval``)-th logged value of the metric, a position, not an iteration;
* top-level entries that are not metrics (``"iteration_timing_avg": 0.119``), in place;
* the byte layout: key order, indent (4, 1 or one line), final newline, number spellings.

Not Megatron-LM's: ``value_precision`` (no Megatron golden has it; its checker ignores unknown
keys) is refused with a one-line error. Inference goldens (request ids with
``generated_tokens``), ``{}`` and empty files are refused: they hold no training metrics.

Left out by this format's rule (listed, never compared exactly): ``iteration-time`` and ``mem-*``,
which Megatron-LM's checker compares only approximately.

Verdict (Megatron-LM's ``pipeline`` with its Deterministic test; docs/formats.md): the golden's
steps only (extra run steps are ignored); a golden ``"nan"`` matches only a step the run does not
have; a golden number needs the run's value there: a value Megatron's extractor could write
(at most 5 decimals: it writes ``round(x, 5)``) matches when the run's value rounded to 5
decimals equals it, as Megatron compares; any other value only matches the run's value bit for
bit. A NaN or infinite value anywhere in the run's series fails it: Megatron's extractor
refuses to write one (``allow_nan=False``), so its test fails.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from detaudit.data.compare import ABSENT, PairDivergence, SeriesData, classify
from detaudit.data.values import format_value, same_value
from detaudit.errors import InputError
from detaudit.standards.formats.common import (
    Format,
    JsonLayout,
    Source,
    detect_layout,
    dump_json,
    int_step_key,
    is_number,
    last_by_step,
    require_int_steps,
    require_number,
)
from detaudit.standards.model import Standard

NAME = "megatron"
MISSING = "nan"  # a step Megatron's extractor had no value for
HEADER = ("start_step", "end_step", "step_interval")
ENTRY_KEYS = (*HEADER, "values")
# Megatron's extractor (read_tb_logs_as_list) writes every scalar as round(value, 5).
DECIMALS = 5
# Megatron's writer (get_test_results_from_tensorboard_logs.py): json.dumps(indent=4), no final newline.
WRITER = JsonLayout(indent=4, item_separator=",", final_newline=False)
_INFERENCE_KEYS = {"generated_tokens", "generated_text", "logprobs"}
# The metrics Megatron-LM's checker compares only approximately, never deterministically
# (test_pretraining_regular_pipeline.py CHECK_THRESHOLDS @ d98e8a64: iteration-time,
# mem-allocated-bytes, mem-max-allocated-bytes have an ApproximateTest alone): wall clock and
# allocator figures. 836 of Megatron-LM's 915 goldens hold them.
APPROXIMATE_ONLY = ("iteration-time", "mem-*")


def _is_metric(entry: Any) -> bool:
    return isinstance(entry, dict) and "values" in entry


def detect(source: Source) -> bool:
    doc = source.doc
    if not isinstance(doc, dict):
        return False
    entries = [v for v in doc.values() if isinstance(v, dict)]
    return bool(entries) and all("values" in v for v in entries)


def refuse(source: Source) -> str | None:
    """Why a Megatron-LM file that is not a metrics golden cannot be a standard (None: it is none)."""
    doc = source.doc
    if not isinstance(doc, dict):
        return None
    entries = [v for v in doc.values() if isinstance(v, dict)]
    if _INFERENCE_KEYS & set(doc) or any(_INFERENCE_KEYS & set(v) for v in entries):
        return ("a Megatron-LM inference golden (generated tokens and logprobs per request), not training "
                "metrics; detaudit compares metric series, it cannot check this file")
    return None


# --- reading ---------------------------------------------------------------------------------


def _cell(path: Path, name: str, step: int, value: Any) -> Any:
    if value == MISSING and type(value) is str:
        return MISSING
    if type(value) is float and not math.isfinite(value):
        raise InputError(path, f"series {name!r}: step {step}: {format_value(value)} is not a value Megatron-LM "
                               "writes (its extractor refuses NaN and infinity; a step it did not log is \"nan\")")
    if not is_number(value):
        raise InputError(path, f"series {name!r}: step {step}: value {format_value(value)[:60]} is not a number "
                               "or \"nan\"")
    return value


def _entry(path: Path, name: str, entry: dict[str, Any]) -> tuple[SeriesData, dict[str, Any]]:
    if "value_precision" in entry:
        raise InputError(path, f"series {name!r}: \"value_precision\" is not a Megatron-LM field (no Megatron golden "
                               "has it and its checker ignores it); remove it: goldens are compared at Megatron's own "
                               f"{DECIMALS} decimals")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise InputError(path, f"series {name!r}: unknown key {unknown[0]!r} (a Megatron-LM metric holds "
                               f"{', '.join(ENTRY_KEYS)})")
    info: dict[str, Any] = {}
    for key in HEADER:
        if key not in entry:
            raise InputError(path, f"series {name!r}: no {key!r} (Megatron-LM's GoldenValueMetric requires "
                                   f"{', '.join(ENTRY_KEYS)})")
        if type(entry[key]) is not int:
            raise InputError(path, f"series {name!r}: {key!r} must be an integer, got {format_value(entry[key])[:40]}")
        info[key] = entry[key]
    raw = entry["values"]
    if isinstance(raw, list):
        start, interval = info["start_step"], info["step_interval"]
        if interval <= 0 or start < 0:
            raise InputError(path, f"series {name!r}: list-shaped values need start_step >= 0 and step_interval > 0")
        items = [(start + i * interval, v) for i, v in enumerate(raw)]
        info["list"] = True
    elif isinstance(raw, dict):
        items = sorted(((int_step_key(path, name, k), v) for k, v in raw.items()), key=lambda p: p[0])
    else:
        raise InputError(path, f"series {name!r}: \"values\" must be an object of step -> value (or a list)")
    steps, values, missing = [], [], []
    for step, value in items:
        if _cell(path, name, step, value) is MISSING:
            missing.append(step)
        else:
            steps.append(step)
            values.append(value)
    if missing:
        info["missing"] = missing
    return SeriesData(name, "", steps, values), info


def load(path: Path, source: Source) -> Standard:
    doc = source.doc
    series: dict[str, SeriesData] = {}
    headers: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    for name, entry in doc.items():
        if not _is_metric(entry):
            if isinstance(entry, dict):
                raise InputError(path, f"top-level entry {name!r} is an object without \"values\": not a Megatron-LM metric")
            extra[name] = entry
            continue
        series[name], headers[name] = _entry(path, name, entry)
    layout = detect_layout(source.text, source.spellings).to_json()
    layout["order"] = list(doc)
    native: dict[str, Any] = {"format": NAME, "series": headers, "layout": layout}
    if extra:
        native["extra"] = extra
    return Standard(series=series, format=NAME, native=native, path=path, source_text=source.text)


# --- writing ---------------------------------------------------------------------------------


def infer_interval(steps: list[int]) -> int:
    """The step interval as Megatron's extractor infers it: the gcd of the gaps, the first (start) sample aside."""
    cadence = steps[1:]
    if len(cadence) < 2:
        return 1
    return math.gcd(*(b - a for a, b in zip(cadence, cadence[1:], strict=False))) or 1


def _render_entry(name: str, data: SeriesData, info: dict[str, Any], target: str) -> dict[str, Any]:
    require_int_steps(target, NAME, data)
    for step, value in data.points():
        require_number(target, NAME, name, step, value, nonfinite=False)
    cells: dict[int, Any] = dict(data.points())
    for step in info.get("missing", []):
        if step in cells:
            raise InputError(target, f"series {name!r}: step {step} is both a value and \"nan\"")
        cells[step] = MISSING
    ordered = sorted(cells)
    entry: dict[str, Any] = {
        "start_step": info.get("start_step", ordered[0] if ordered else 0),
        "end_step": info.get("end_step", ordered[-1] if ordered else 0),
        "step_interval": info.get("step_interval", infer_interval(ordered)),
    }
    if info.get("list"):
        start, interval = entry["start_step"], entry["step_interval"]
        if ordered != list(range(start, start + interval * len(ordered), interval)):
            raise InputError(target, f"series {name!r}: positions no longer fit start_step {start} every {interval}")
        entry["values"] = [cells[s] for s in ordered]
    else:
        entry["values"] = {str(s): cells[s] for s in ordered}
    return entry


def render(standard: Standard, target: str) -> str:
    own = standard.native if standard.native.get("format") == NAME else {}
    layout_doc = own.get("layout", {})
    layout = JsonLayout.from_json(target, layout_doc, WRITER)
    headers = own.get("series", {})
    extra = own.get("extra", {})
    entries = {name: _render_entry(name, data, headers.get(name, {}), target) for name, data in standard.series.items()}
    doc: dict[str, Any] = {}
    for key in layout_doc.get("order", []):  # the file's key order, top-level entries in place
        if key in entries:
            doc[key] = entries[key]
        elif key in extra:
            doc[key] = extra[key]
    for key, value in list(entries.items()) + list(extra.items()):
        doc.setdefault(key, value)
    try:
        return dump_json(doc, layout, allow_nan=False)
    except ValueError as exc:  # a non-finite number among the kept top-level entries
        raise InputError(target, f"{NAME} cannot hold a top-level entry: {exc}") from None


def describe_native(native: dict[str, Any]) -> list[str]:
    """What of ``native`` a reader should know is there (``show``; what a conversion would lose)."""
    series = native.get("series", {})
    out = []
    if series:
        out.append(f"start_step/end_step/step_interval of {len(series)} series")
    cells = {name: len(info.get("missing", [])) for name, info in series.items() if info.get("missing")}
    if cells:
        out.append(f"\"nan\" cells ({sum(cells.values())} in {len(cells)} series: steps the run must not have)")
    listed = [name for name, info in series.items() if info.get("list")]
    if listed:
        out.append(f"list-shaped values of {len(listed)} series (item i is the run's i-th logged value)")
    if native.get("extra"):
        out.append("top-level entries " + ", ".join(map(repr, native["extra"])))
    return out


def check_native(path: Path | str, native: dict[str, Any]) -> None:
    """``native`` as a detaudit file carries it for a standard converted from a Megatron-LM golden."""
    series = native.get("series", {})
    ok = isinstance(series, dict) and isinstance(native.get("extra", {}), dict)
    for info in series.values() if isinstance(series, dict) else ():
        ok = ok and isinstance(info, dict) and set(info) <= {*HEADER, "missing", "list"}
        ok = ok and all(type(info[k]) is int for k in HEADER if k in info)
        ok = ok and isinstance(info.get("missing", []), list) and all(type(s) is int for s in info.get("missing", []))
        ok = ok and info.get("list", False) in (True, False)
    layout = native.get("layout", {})
    ok = ok and isinstance(layout, dict) and isinstance(layout.get("order", []), list)
    if not ok:
        raise InputError(path, "native: not what a Megatron-LM golden carries (series headers, \"nan\" cells, "
                               "top-level entries, layout)")
    JsonLayout.from_json(path, layout, WRITER)


# --- comparing ---------------------------------------------------------------------------------


def value_matches(golden: Any, run: Any) -> bool:
    """Does the run's value match the golden's, as Megatron-LM's Deterministic test decides?"""
    if not (is_number(golden) and is_number(run)):
        return False
    if type(run) is float and not math.isfinite(run):
        return False  # Megatron's extractor refuses NaN and infinity: the test fails
    if type(golden) is int or round(golden, DECIMALS) == golden:
        return (round(run, DECIMALS) if type(run) is float else run) == golden
    return same_value(golden, run)  # no extractor wrote this value: only the very same value matches


def compare(expected: SeriesData, native: dict[str, Any], actual: SeriesData | None) -> PairDivergence | None:
    cells: list[tuple[int, Any]] = sorted([*expected.points(),
                                           *((s, MISSING) for s in native.get("missing", []))], key=lambda c: c[0])
    if actual is None:
        return PairDivergence(1, 0, "missing", cells[0][0] if cells else ABSENT,
                              expected.values[0] if len(expected) else ABSENT, ABSENT, len_a=len(cells))
    for index, value in enumerate(actual.values):  # Megatron's extractor refuses the whole run then
        if type(value) is float and not math.isfinite(value):
            step = actual.steps[index]
            golden = dict(cells).get(step if not native.get("list") else index, ABSENT)
            return PairDivergence(1, index, "nan", step, golden, value, step, step, len(cells), len(actual))
    if native.get("list"):  # positions of the run's logged values
        run_at = {i: (i, v) for i, v in enumerate(actual.values)}
    else:
        run_at = last_by_step(actual)
    present = sum(1 for step, _ in cells if step in run_at)
    for index, (step, golden) in enumerate(cells):
        hit = run_at.get(step)
        if golden is MISSING:
            if hit is not None:
                where = actual.steps[hit[0]] if native.get("list") else step
                return PairDivergence(1, index, "nan", where, MISSING, hit[1], where, actual.steps[hit[0]],
                                      len(cells), present)
            continue
        if hit is None:
            return PairDivergence(1, index, "steps", step, golden, ABSENT, step, ABSENT, len(cells), present)
        if not value_matches(golden, hit[1]):
            where = actual.steps[hit[0]] if native.get("list") else step  # a position is named by the run's step
            return PairDivergence(1, index, classify(golden, hit[1]), where, golden, hit[1], where,
                                  actual.steps[hit[0]], len(cells), present)
    return None


def sample_run(expected: SeriesData, native: dict[str, Any], actual: SeriesData) -> SeriesData:
    """The run's values at the golden's steps (positions in the list layout), as an update writes
    them: the golden keeps its steps, its "nan" steps and its header; a step the run lacks is an error."""
    if native.get("list"):
        run_at = {i: (i, v) for i, v in enumerate(actual.values)}
    else:
        run_at = last_by_step(actual)
    values = []
    for step in expected.steps:
        hit = run_at.get(step)
        if hit is None:
            where = f"logged value #{step}" if native.get("list") else f"step {step}"
            raise InputError(actual.name or expected.name, f"series {expected.name!r}: the run has no {where}, which "
                                                           "this Megatron-LM golden samples; it cannot be updated from this run")
        values.append(hit[1])
    return SeriesData(expected.name, expected.step_key, list(expected.steps), values)


FORMAT = Format(
    name=NAME,
    title="Megatron-LM golden values",
    shape='metrics with "start_step", "end_step", "step_interval", "values" (Megatron-LM)',
    order=2,
    detect=detect,
    load=load,
    render=render,
    compare=compare,
    sample_run=sample_run,
    rule="Megatron-LM's functional test (Deterministic): the golden's steps only; a \"nan\" step must be absent "
         f"from the run; a value with at most {DECIMALS} decimals matches the run's value rounded to {DECIMALS} "
         "decimals, any other value only the same value; a NaN or infinity anywhere in the run's series fails it",
    holds_step_types=False,
    describe_native=describe_native,
    check_native=check_native,
    refuse=refuse,
    approximate_only=APPROXIMATE_ONLY,
    approximate_reason="Megatron-LM checks it only approximately (ApproximateTest), never deterministically",
)
