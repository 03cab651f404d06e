"""Each framework's own verdict, written from its checker's semantics (docs/formats.md), independent
of detaudit's code: the reference the parity tests hold detaudit to.

A run is a list of JSONL records (dicts) as a metrics file holds them; each function reads the
golden file's text with the framework's own reading (Python's ``json``, ``str.split``) and
returns True (PASS) or False (FAIL). Sources: Megatron-LM @ d98e8a64
``tests/functional_tests/python_test_utils/common.py`` (``read_tb_logs_as_list``, ``pipeline``),
legacy ``test_ci_pipeline.py::_test_helper`` @ 831d64d7; TorchTitan @ b5bcd76c
``scripts/loss_compare.py`` (``read_losses_from_file``, ``assert_losses_equal``); miles_diffusion
``tests/ci/e2e_metrics_registry.py`` (``load_series``, ``check_or_update``, ``_values_match``) @ 0f442bb2.
"""

from __future__ import annotations

import json
import math
from typing import Any

INF = math.inf


def run_points(records: list[dict[str, Any]], name: str) -> list[tuple[Any, Any]]:
    """(step, value) of one metric in emission order: the step is the line's ``step_key`` field."""
    return [(rec[rec["step_key"]], rec[name]) for rec in records if name in rec]


def megatron(golden_text: str, records: list[dict[str, Any]]) -> bool:
    """Megatron-LM's functional test in deterministic mode over every metric of the golden."""
    golden = json.loads(golden_text)
    if any(isinstance(e, dict) and isinstance(e.get("values"), list) for e in golden.values()):
        return _megatron_legacy(golden, records)
    if not all(isinstance(e, dict) for e in golden.values()):
        return False  # GoldenValues (pydantic) refuses a top-level entry that is not a metric
    for metric, entry in golden.items():
        points = run_points(records, metric)
        if not points:
            return False  # MissingTensorboardLogsError
        actual: dict[int, Any] = {}
        for step, value in points:
            if not math.isfinite(value):
                return False  # the extractor's json.dumps(allow_nan=False) raises
            actual[step] = round(value, 5)  # read_tb_logs_as_list
        values = entry["values"]
        if not values:
            return False  # "has no values in the golden file"
        for key, gold in values.items():
            got = actual.get(int(key), "nan")
            got = INF if isinstance(got, str) else got
            gold = INF if isinstance(gold, str) else gold
            if not got == gold:  # np.isclose(rtol=0, atol=0); inf is close to inf
                return False
    return True


def _megatron_legacy(golden: dict[str, Any], records: list[dict[str, Any]]) -> bool:
    # Before 2025: the run's TensorBoard values as a list, sliced [start_step:end_step:step_interval].
    for metric, entry in golden.items():
        if not isinstance(entry, dict):
            continue  # a top-level figure (iteration_timing_avg) the legacy test did not compare
        values = [v for _, v in run_points(records, metric)]
        if not values or any(not math.isfinite(v) for v in values):
            return False
        sliced = values[entry["start_step"]:entry["end_step"]:entry["step_interval"]]
        sliced = [round(v, 5) for v in sliced]
        if len(sliced) != len(entry["values"]) or any(not a == b for a, b in zip(sliced, entry["values"])):
            return False
    return True


def torchtitan(golden_text: str, records: list[dict[str, Any]], name: str = "loss") -> bool:
    """TorchTitan's ``loss_compare.py --import-result FILE --assert-equal``."""
    imported: dict[int, float] = {}
    for line in golden_text.splitlines(keepends=False):
        step, value = line.strip().split()
        imported[int(step)] = float(value)
    baseline = {step: float(value) for step, value in run_points(records, name)}
    if not baseline or not imported:
        return False
    if set(baseline) != set(imported):
        return False
    return all(baseline[step] == imported[step] for step in imported)


def miles(golden_text: str, records: list[dict[str, Any]]) -> bool:
    """miles' registry check with no tolerances; the test's metric list is the standard's series."""
    standard = json.loads(golden_text)["metrics"]
    for metric, expected in standard.items():
        points = run_points(records, metric)
        if not points:
            return False  # "metrics never emitted"
        if len(points) != len(expected):
            return False
        for (step, value), (std_step, std_value) in zip(points, expected):
            if step != std_step or not _miles_values_match(value, std_value):
                return False
    return True


def _miles_values_match(got: Any, want: Any) -> bool:
    """``_values_match(got, want, None)``: math.isnan of both values first, which raises for anything
    that is no number (a string, null, a list, an object) or an int beyond float range: the check
    then fails with that error, whatever the values."""
    try:
        got_nan, want_nan = math.isnan(got), math.isnan(want)
    except (TypeError, OverflowError):
        return False
    if got_nan or want_nan:
        return got_nan and want_nan
    return got == want
