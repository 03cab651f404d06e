"""Verdict parity: a run gets the same PASS/FAIL from detaudit as from the framework's own checker
(``native_checkers``, written from each checker's semantics), and the same verdict whether the
standard is the framework's file or its detaudit conversion.

Goldens are real files from ``fixtures/goldens`` (SOURCES.md); runs are built from them by the
readers below (not detaudit's), then changed one way per case.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest

import native_checkers
from conftest import run_cli
from golden_runs import Cells, cells_of, is_list_golden, records_of, write_run
from detaudit.errors import InputError
from detaudit.standards.check import check_run
from detaudit.standards.formats import convert, load_any

GOLDENS = Path(__file__).parent / "fixtures" / "goldens"
MEGATRON_NAN = GOLDENS / "megatron" / "9f412873__gpt__gpt3_345m_nightly_dgx_a100_1N8G_tp1_pp1_overlap_grad_reduce__golden_values_lts.json"
MEGATRON_SAMPLED = GOLDENS / "megatron" / "bert__bert_mcore_tp1_pp2__golden_values_dev_dgx_a100.json"
MEGATRON_NAN_TAIL = GOLDENS / "megatron" / "moe__gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading__golden_values_dev_dgx_gb200.json"
MEGATRON_LIST = GOLDENS / "megatron" / "831d64d7__gpt__gpt3_mr_mcore_te_tp2_pp2_defer_embedding_wgrad_compute_dgx_a100_1N8G__golden_values_lts.json"
TORCHTITAN = GOLDENS / "torchtitan" / "llama3_cuda.txt"
TORCHTITAN_RL = GOLDENS / "torchtitan" / "torchtitan__experiments__rl__rl_grpo_cuda.txt"
MILES = GOLDENS / "miles" / "test_cosmos3_pickscore_grpo_t2i_4xGPU.json"
MILES_NAN = GOLDENS / "miles" / "test_sd3_nft_pickscore_3xGPU.json"
NEMO = GOLDENS / "synthetic" / "nemo" / "nemo_metrics_grpo_20steps.json"

# --- the cases: (golden text, cells, records) -> changed (golden text, records), or None --------------


def _first_float(cells: Cells) -> tuple[str, int]:
    for name, points in cells.items():
        for i, (_, value) in enumerate(points):
            if type(value) is float and math.isfinite(value):
                return name, i
    raise AssertionError("no finite float")


def _where(records: list[dict[str, Any]], name: str, step: Any) -> dict[str, Any]:
    return next(r for r in records if name in r and r[r["step_key"]] == step)


def case_repro(fmt, text, cells, records):
    return text, records


def case_extra_step(fmt, text, cells, records):
    name, points = next(iter(cells.items()))
    step = points[-1][0] + 1000
    step = float(step) if type(points[-1][0]) is float else step
    key = records[-1]["step_key"] if fmt == "megatron" and is_list_golden(text) else f"{name}/step"
    return text, records + [{"step_key": key, key: step, name: 1.0}]


def case_missing_step(fmt, text, cells, records):
    name, i = _first_float(cells)
    step = cells[name][i][0]
    if fmt == "megatron" and is_list_golden(text):  # drop the logged values from that position on
        return text, [r for r in records if not (name in r and r["iteration"] > step)]
    return text, [r for r in records if not (name in r and r[r["step_key"]] == step)]


def _run_ulp(fmt, text, cells, records):
    name, i = _first_float(cells)
    step, value = cells[name][i]
    changed = [dict(r) for r in records]
    key = step + 1 if fmt == "megatron" and is_list_golden(text) else step
    hit = _where(changed, name, key)
    hit[name] = math.nextafter(value, math.inf)
    return text, changed


case_run_one_ulp = _run_ulp


def case_golden_one_ulp(fmt, text, cells, records):
    name, i = _first_float(cells)
    step, value = cells[name][i]
    bumped = math.nextafter(value, math.inf)
    if fmt == "torchtitan":
        lines = text.splitlines(keepends=True)
        lines[i] = f"{step} {bumped!r}\n"
        return "".join(lines), records
    doc = json.loads(text)
    if fmt == "miles":
        doc["metrics"][name][i][1] = bumped
    elif fmt == "nemo":
        doc[name][str(step)] = bumped
    elif isinstance(doc[name]["values"], list):
        doc[name]["values"][i] = bumped
    else:
        doc[name]["values"][str(step)] = bumped
    return json.dumps(doc, indent=4), records


def case_value_at_nan_cell(fmt, text, cells, records):
    """Megatron: the run logs a value where the golden says "nan" (not logged)."""
    for name, points in cells.items():
        for step, value in points:
            if value == "nan":
                return text, records + [{"step_key": f"{name}/step", f"{name}/step": step, name: 1.0}]
    return None


def case_int_for_float(fmt, text, cells, records):
    """The run logs 768 where the golden holds 768.0."""
    for name, points in cells.items():
        for step, value in points:
            if type(value) is float and value.is_integer():
                changed = [dict(r) for r in records]
                key = step + 1 if fmt == "megatron" and is_list_golden(text) else step
                _where(changed, name, key)[name] = int(value)
                return text, changed
    return None


def case_signed_zero(fmt, text, cells, records):
    """The run logs -0.0 where the golden holds 0.0."""
    for name, points in cells.items():
        for step, value in points:
            if type(value) is float and value == 0.0:
                changed = [dict(r) for r in records]
                _where(changed, name, step)[name] = -0.0
                return text, changed
    return None


def case_nan_in_run_off_golden(fmt, text, cells, records):
    """Megatron: a NaN the run logs at a step the golden does not list."""
    if fmt != "megatron" or is_list_golden(text):
        return None
    name, points = next(iter(cells.items()))
    return text, records + [{"step_key": f"{name}/step", f"{name}/step": points[-1][0] + 1000, name: math.nan}]


def case_nan_both(fmt, text, cells, records):
    """Golden and run both hold a NaN at the same step (TorchTitan: a file line `STEP nan`)."""
    if fmt != "torchtitan":
        return None
    lines = text.splitlines(keepends=True)
    step = int(lines[0].split()[0])
    changed = [dict(r) for r in records]
    _where(changed, "loss", step)["loss"] = math.nan
    return f"{step} nan\n" + "".join(lines[1:]), changed


def case_number_for_nan(fmt, text, cells, records):
    """The golden holds a NaN where the run logs a number (TorchTitan: a file line `STEP nan`)."""
    if fmt == "torchtitan":
        lines = text.splitlines(keepends=True)
        return f"{lines[0].split()[0]} nan\n" + "".join(lines[1:]), records
    for name, points in cells.items():
        for step, value in points:
            if type(value) is float and math.isnan(value):
                changed = [dict(r) for r in records]
                _where(changed, name, step)[name] = 0.5
                return text, changed
    return None


CASES: dict[str, Callable[..., Any]] = {
    "repro": case_repro,
    "extra run step": case_extra_step,
    "missing run step": case_missing_step,
    "run 1 ULP off": case_run_one_ulp,
    "golden 1 ULP off": case_golden_one_ulp,
    "value at a \"nan\" cell": case_value_at_nan_cell,
    "int for float": case_int_for_float,
    "-0.0 for 0.0": case_signed_zero,
    "NaN in the run off the golden's steps": case_nan_in_run_off_golden,
    "NaN in golden and run": case_nan_both,
    "a number for a NaN": case_number_for_nan,
}

GOLDEN_FILES = {
    "megatron": [MEGATRON_NAN, MEGATRON_SAMPLED, MEGATRON_NAN_TAIL, MEGATRON_LIST],
    "torchtitan": [TORCHTITAN, TORCHTITAN_RL],
    "miles": [MILES, MILES_NAN],
}
NATIVE = {"megatron": native_checkers.megatron, "torchtitan": native_checkers.torchtitan, "miles": native_checkers.miles}

# What each framework's checker says (docs/formats.md), so that detaudit and the reference checkers
# are both held to the stated semantics, not only to each other.
EXPECTED = {
    ("megatron", "repro"): True, ("megatron", "extra run step"): True, ("megatron", "missing run step"): False,
    ("megatron", "run 1 ULP off"): True, ("megatron", "golden 1 ULP off"): False,
    ("megatron", "value at a \"nan\" cell"): False, ("megatron", "int for float"): True,
    ("megatron", "NaN in the run off the golden's steps"): False,
    ("torchtitan", "repro"): True, ("torchtitan", "extra run step"): False, ("torchtitan", "missing run step"): False,
    ("torchtitan", "run 1 ULP off"): False, ("torchtitan", "golden 1 ULP off"): False,
    ("torchtitan", "NaN in golden and run"): False,
    ("miles", "repro"): True, ("miles", "extra run step"): False, ("miles", "missing run step"): False,
    ("miles", "run 1 ULP off"): False, ("miles", "golden 1 ULP off"): False, ("miles", "int for float"): True,
    ("miles", "-0.0 for 0.0"): True, ("miles", "a number for a NaN"): False, ("torchtitan", "a number for a NaN"): False,
}


def detaudit_verdict(standard: Path, run: Path) -> bool | str:
    """PASS (True), FAIL (False), or the error (never a pass) of detaudit's check."""
    try:
        return not check_run(load_any(standard), run).failures
    except InputError as exc:
        return f"error: {exc}"


def verdicts(fmt: str, golden: Path, case: str, tmp_path: Path) -> tuple[bool, bool | str, bool | str] | None:
    text = golden.read_text()
    cells = cells_of(fmt, text)
    changed = CASES[case](fmt, text, cells, records_of(fmt, text, cells))
    if changed is None:
        return None
    text, records = changed
    native_file = tmp_path / f"golden{golden.suffix}"
    native_file.write_text(text)
    run = write_run(tmp_path / "run.jsonl", records)
    converted = tmp_path / "golden.detaudit.json"
    converted.write_text(convert(load_any(native_file), "detaudit", target=converted).text)
    return NATIVE[fmt](text, records), detaudit_verdict(native_file, run), detaudit_verdict(converted, run)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("fmt", list(GOLDEN_FILES))
def test_same_verdict_as_the_frameworks_checker_native_or_converted(fmt: str, case: str, tmp_path: Path) -> None:
    seen = 0
    for golden in GOLDEN_FILES[fmt]:
        result = verdicts(fmt, golden, case, tmp_path)
        if result is None:
            continue
        seen += 1
        native, stored_native, stored_converted = result
        assert stored_native == native, f"{golden.name}: {case}: framework says {native}, detaudit {stored_native}"
        assert stored_converted == stored_native, f"{golden.name}: {case}: converted to detaudit: {stored_converted}"
        if (fmt, case) in EXPECTED:
            assert native == EXPECTED[(fmt, case)], f"{golden.name}: {case}: the reference checker disagrees with the docs"
    if (fmt, case) in EXPECTED:
        assert seen, f"no golden of {fmt} has the case {case!r}"


@pytest.mark.parametrize("case", ["repro", "extra run step", "missing run step", "run 1 ULP off", "golden 1 ULP off",
                                  "a number for a NaN"])
def test_nemo_has_no_native_checker_and_keeps_its_verdict_converted(case: str, tmp_path: Path) -> None:
    # NeMo-RL commits no golden: detaudit's rule for this shape is exact (steps by number); the
    # verdict must still not depend on how the standard is stored.
    text = NEMO.read_text()
    cells = cells_of("nemo", text)
    text, records = CASES[case]("nemo", text, cells, records_of("nemo", text, cells))
    native_file = tmp_path / "metrics.json"
    native_file.write_text(text)
    run = write_run(tmp_path / "run.jsonl", records)
    converted = tmp_path / "metrics.detaudit.json"
    converted.write_text(convert(load_any(native_file), "detaudit", target=converted).text)
    expected = case == "repro"  # exact: every other change fails
    assert detaudit_verdict(native_file, run) is expected
    assert detaudit_verdict(converted, run) is expected


@pytest.mark.slow
def test_verify_cli_gives_the_verdict_and_names_series_and_step(tmp_path: Path) -> None:
    text = MEGATRON_NAN.read_text()
    cells = cells_of("megatron", text)
    _, records = case_value_at_nan_cell("megatron", text, cells, records_of("megatron", text, cells))
    run = write_run(tmp_path / "run.jsonl", records)
    result = run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON_NAN))
    assert result.code == 1, result.text
    assert "num-zeros: step 1: standard 'nan', run 1.0" in result.out
    converted = tmp_path / "golden.json"
    assert run_cli("standard", "convert", str(MEGATRON_NAN), str(converted), "--format", "detaudit").code == 0
    again = run_cli("verify", "--metrics", str(run), "--standard", str(converted))
    assert again.code == 1 and "num-zeros: step 1: standard 'nan', run 1.0" in again.out
