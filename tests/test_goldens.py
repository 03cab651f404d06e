"""Real golden files of other frameworks (fixtures/goldens, SOURCES.md): every file is read or
refused with a one-line reason; converting it to its own format gives its very bytes; to detaudit
and back gives its very bytes (or the conversion is refused, naming what would be lost); `standard
diff` calls a file and its conversion identical only when they hold the same information; a run
logging the golden's values passes, and a golden one ULP off fails, naming series and step.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from conftest import run_cli
from golden_runs import cells_of, is_list_golden, records_of, write_run
from detaudit.data.compare import SeriesData
from detaudit.errors import InputError
from detaudit.standards.check import check_run
from detaudit.standards.diff import diff_standards
from detaudit.standards.formats import convert, load_any
from detaudit.standards.formats.registry import information, load_source, read_source

GOLDENS = Path(__file__).parent / "fixtures" / "goldens"
FILES = sorted(p for p in GOLDENS.rglob("*") if p.is_file() and p.name != "SOURCES.md")

# Files that are no standard, and the reason each is refused with (one line, naming the file).
REFUSED = {
    "24a1fe07__gpt__gpt3_weekly_dgx_h100_mcore_tp1_pp2_fp8_pp__golden_values_dev_dgx_a100.json": "is not a number",
    "gpt__gpt3_7b_tp4_pp1_memory_speed__golden_values_lts_dgx_a100.json": "an empty JSON object: no series",
    "gpt__gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed__golden_values_dev_dgxh100_dgxc.json": "empty file",
    "gpt__gpt_static_inference_tp1_pp1_583m_logitsmatch__golden_values_dev_dgx_a100.json": "inference golden",
    "hybrid__hybrid_dynamic_inference_tp1_pp1_dp8_2b_async_sched_async__golden_values_dev_dgx_h100.json":
        "inference golden",
    "moe__gpt_dynamic_inference_tp2_pp2_ep2_gptoss_20b_swa__golden_values_dev_dgx_h100.json": "inference golden",
    "megatron_dup_metric_key.json": "duplicate key 'lm loss'",
    "megatron_dup_step_key.json": "duplicate key '5'",
    "miles_dup_series_key.json": "duplicate key 'train/loss'",
    "nemo_dup_step_key.json": "duplicate key '1'",
    "megatron_value_precision_-1.json": "value_precision\" is not a Megatron-LM field",
    "megatron_value_precision_0.json": "value_precision\" is not a Megatron-LM field",
    "megatron_value_precision_2.json": "value_precision\" is not a Megatron-LM field",
    "megatron_value_precision_400.json": "value_precision\" is not a Megatron-LM field",
}
# Read, but laid out in a way no writer of its format lays it out: conversions are refused.
LAYOUT_REFUSED = {"miles_zero_points.json"}  # one line, unsorted keys: miles writes indent=2, sort_keys
# Series with no value to compare: verify refuses them (never a pass).
NOTHING_TO_COMPARE = {"megatron_zero_points.json", "megatron_zero_points_list.json", "megatron_all_nan_list.json",
                      "megatron_all_nan_series.json", "miles_zero_points.json", "nemo_zero_points.json"}
READABLE = [p for p in FILES if p.name not in REFUSED]
# Megatron-LM goldens of series its checker compares only approximately (iteration-time, mem-*;
# test_grpo_training_loop.py checks this one by tolerance alone): nothing is left to compare exactly.
APPROXIMATE_ONLY = {"gpt__gpt_grpo_tp4_pp1_dp2_8b_throughput_github__golden_values_dev_dgx_h100.json"}


def ident(path: Path) -> str:
    return str(path.relative_to(GOLDENS))


def framework(path: Path) -> str:
    return load_any(path).format


def test_the_corpus_is_what_sources_md_lists() -> None:
    sources = (GOLDENS / "SOURCES.md").read_text()
    listed = {line.split("`")[1] for line in sources.splitlines() if line.startswith("| `")}
    assert listed == {ident(p) for p in FILES}
    real = [p for p in FILES if "synthetic" not in p.parts]
    assert len([p for p in real if p.parts[-2] == "megatron"]) >= 10
    assert {p.parts[len(GOLDENS.parts)] for p in real} == {"megatron", "miles", "torchtitan"}


@pytest.mark.parametrize("path", [p for p in FILES if p.name in REFUSED], ids=ident)
def test_files_that_are_no_standard_are_refused_in_one_line(path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_any(path)
    assert REFUSED[path.name] in str(err.value) and str(err.value).startswith(str(path))
    assert "\n" not in str(err.value)


def test_refusals_through_the_cli_are_one_line_exit_2() -> None:
    for name in ("24a1fe07__gpt__gpt3_weekly_dgx_h100_mcore_tp1_pp2_fp8_pp__golden_values_dev_dgx_a100.json",
                 "megatron_dup_step_key.json", "hybrid__hybrid_dynamic_inference_tp1_pp1_dp8_2b_async_sched_async"
                 "__golden_values_dev_dgx_h100.json"):
        path = next(p for p in FILES if p.name == name)
        result = run_cli("standard", "show", str(path))
        assert result.code == 2 and result.out == "", result.text
        assert result.err.startswith(f"detaudit: error: {path}") and result.err.count("\n") == 1, result.err


@pytest.mark.parametrize("path", READABLE, ids=ident)
def test_own_format_and_detaudit_round_trip_keep_the_bytes(path: Path) -> None:
    std = load_any(path)
    original = path.read_text()
    if path.name in LAYOUT_REFUSED:
        for fmt in (std.format, "detaudit"):
            with pytest.raises(InputError, match="byte layout is not one detaudit reproduces"):
                convert(std, fmt, target="out")
        return
    assert convert(std, std.format, target="own").text == original
    text = convert(std, "detaudit", target="det.json").text
    back = load_source("det.json", read_source("det.json", text))
    assert convert(back, std.format, target="back").text == original
    assert diff_standards(std, back).identical  # the same information, two formats
    assert diff_standards(std, back).to_json()["identical"] is True


@pytest.mark.parametrize("path", READABLE, ids=ident)
def test_diff_says_identical_only_for_the_same_information(path: Path) -> None:
    std = load_any(path)
    if path.name in LAYOUT_REFUSED:
        return
    det = load_source("det.json", read_source("det.json", convert(std, "detaudit", target="det.json").text))
    lossy = [dataclasses.replace(det, native={}), dataclasses.replace(det, comparison="detaudit")]
    if std.meta:
        lossy.append(dataclasses.replace(det, meta={}))
    layout_only = dataclasses.replace(det, native={k: v for k, v in det.native.items() if k != "layout"})
    assert diff_standards(std, layout_only).identical  # the byte layout is no information
    for missing_info in lossy:
        if information(missing_info) == information(det):
            continue  # nothing of that kind to lose in this file
        review = diff_standards(std, missing_info)
        assert not review.identical and review.fields, f"{path.name}: a lossy copy reads as identical"


@pytest.mark.parametrize("path", [p for p in READABLE if p.name not in NOTHING_TO_COMPARE | APPROXIMATE_ONLY],
                         ids=ident)
def test_a_run_of_the_goldens_values_passes_and_a_golden_one_ulp_off_fails(path: Path, tmp_path: Path) -> None:
    fmt, text = framework(path), path.read_text()
    cells = cells_of(fmt, text)
    run = write_run(tmp_path / "run.jsonl", records_of(fmt, text, cells))
    std = load_any(path)
    check = check_run(std, run)
    assert check.failures == []
    name, index, step, value = next((n, i, s, v) for n, points in cells.items() for i, (s, v) in enumerate(points)
                                    if type(v) is float and math.isfinite(v) and n not in check.left_out)
    bumped = math.nextafter(value, math.inf)
    series = std.series[name]
    at = series.steps.index(step)
    values = list(series.values)
    values[at] = bumped
    std.series[name] = SeriesData(name, series.step_key, series.steps, values)
    failures = check_run(std, run).failures
    assert [f[0] for f in failures] == [name]
    # a list-shaped Megatron series is named by the run's step at that position (the run logs iteration i+1 at i)
    named = step + 1 if fmt == "megatron" and is_list_golden(text) else step
    assert failures[0][1].step == named and failures[0][1].value_a == bumped


@pytest.mark.parametrize("path", [p for p in FILES if p.name in APPROXIMATE_ONLY], ids=ident)
def test_a_golden_of_approximate_only_series_compares_nothing(path: Path, tmp_path: Path) -> None:
    fmt, text = framework(path), path.read_text()
    run = write_run(tmp_path / "run.jsonl", records_of(fmt, text, cells_of(fmt, text)))
    result = run_cli("verify", "--metrics", str(run), "--standard", str(path))
    assert result.code == 2 and "nothing to compare" in result.err and "PASSED" not in result.out, result.text
    assert "the megatron format's rule 'mem-*'" in result.err


@pytest.mark.parametrize("path", [p for p in FILES if p.name in NOTHING_TO_COMPARE], ids=ident)
def test_a_series_with_nothing_to_compare_is_an_error_never_a_pass(path: Path, tmp_path: Path) -> None:
    std = load_any(path)
    empty = [n for n, data in std.series.items() if not len(data)]
    # the run logs every series at steps 1..10: a vacuous check would pass
    run = write_run(tmp_path / "run.jsonl", [{"step_key": "s", "s": s, **{n: 0.5 for n in std.series}} for s in range(1, 11)])
    # taken back where the format's rule leaves them out (an all-"nan" iteration-time)
    include = tuple(n for n in empty if n == "iteration-time")
    with pytest.raises(InputError, match="has no value to compare") as err:
        check_run(std, run, include=include)
    assert any(repr(n) in str(err.value) for n in empty)
    result = run_cli("verify", "--metrics", str(run), "--standard", str(path), *(f"--include={n}" for n in include))
    assert result.code == 2 and "has no value to compare" in result.err and "PASSED" not in result.out


def test_show_names_the_rule_and_what_a_megatron_golden_carries() -> None:
    path = GOLDENS / "megatron" / "gpt__gpt3_mcore_tp1_pp2_fp16__golden_values_dev_dgx_a100.json"
    result = run_cli("standard", "show", str(path))
    assert result.code == 0, result.text
    assert "compared by: megatron's rule" in result.out
    assert "list-shaped values of 2 series" in result.out and "top-level entries 'iteration_timing_avg'" in result.out
    nan = run_cli("standard", "show", "--json", str(GOLDENS / "megatron" / "9f412873__gpt__gpt3_345m_nightly_dgx_a100_1N8G"
                                                    "_tp1_pp1_overlap_grad_reduce__golden_values_lts.json"))
    rows = {r["series"]: r for r in json.loads(nan.out)["series"]}
    assert rows["num-zeros"]["not_logged"] == 4 and rows["lm loss"]["not_logged"] == 0


@pytest.mark.slow
def test_cli_convert_round_trip_is_byte_identical_and_diff_agrees(tmp_path: Path) -> None:
    for path in (GOLDENS / "megatron" / "moe__gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading__golden_values"
                 "_dev_dgx_gb200.json", GOLDENS / "miles" / "test_sd3_nft_pickscore_3xGPU.json"):
        fmt = load_any(path).format
        det, back = tmp_path / f"{path.stem}.det.json", tmp_path / f"{path.stem}.back{path.suffix}"
        assert run_cli("standard", "convert", str(path), str(det), "--format", "detaudit").code == 0
        assert run_cli("standard", "convert", str(det), str(back), "--format", fmt).code == 0
        assert back.read_bytes() == path.read_bytes()
        same = run_cli("standard", "diff", str(path), str(det))
        assert same.code == 0, same.text
