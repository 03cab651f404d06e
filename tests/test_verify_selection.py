"""Choosing what verify compares: ``--exclude`` / ``--include`` over the standard's series, and a
``rename`` map (card or standard) from a run's series name to the standard's. Every choice is in
the report, and a run series the standard lacks is listed in the text report too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, write_card, write_jsonl
from detaudit.data.card import load_card
from detaudit.data.compare import SeriesData
from detaudit.errors import InputError, UsageError
from detaudit.standards.check import check_run
from detaudit.standards.formats import load_any, render_as
from detaudit.standards.model import Standard

GOLDENS = Path(__file__).parent / "fixtures" / "goldens"
MEGATRON = GOLDENS / "megatron" / "bert__bert_mcore_tp1_pp2__golden_values_dev_dgx_h100.json"
LOSSES = GOLDENS / "torchtitan" / "sft_debugmodel_cuda.txt"


def megatron_run(tmp_path: Path, wall_clock: float) -> Path:
    """A run with the golden's values, except iteration-time (wall clock: different every run)."""
    golden = json.loads(MEGATRON.read_text())
    lines = []
    for step in range(1, 51):
        rec = {"step_key": "iteration", "iteration": step}
        for name, entry in golden.items():
            if str(step) in entry["values"]:
                rec[name] = wall_clock if name == "iteration-time" else entry["values"][str(step)]
        lines.append(json.dumps(rec))
    return write_jsonl(tmp_path / "run.jsonl", lines)


def loss_run(tmp_path: Path, name: str) -> Path:
    lines = [line.split() for line in LOSSES.read_text().splitlines()]
    return write_jsonl(tmp_path / "run.jsonl", [json.dumps({"step_key": "step", "step": int(s), name: float(v),
                                                            "grad_norm": 1.5}) for s, v in lines])


@pytest.mark.slow
def test_exclude_leaves_series_out_and_the_report_lists_them(tmp_path: Path) -> None:
    run = megatron_run(tmp_path, wall_clock=0.123)
    # iteration-time and mem-* are left out by the Megatron format's own rule; --include takes one back
    assert run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON), "--include", "iteration-time").code == 1
    result = run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON), "--exclude", "num-zeros")
    assert result.code == 0, result.text
    assert "PASSED: 1 metric series match" in result.out
    assert "--exclude 'num-zeros'" in result.out and "the megatron format's rule 'iteration-time'" in result.out
    doc = json.loads(run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON), "--json", "--exclude",
                             "num-zeros", "--include", "mem-allocated-bytes").out)
    assert doc["status"] == "passed" and doc["compared"] == 2
    assert doc["left_out"]["num-zeros"] == "--exclude 'num-zeros'"
    assert doc["left_out"]["mem-max-allocated-bytes"].startswith("the megatron format's rule 'mem-*': ")
    assert "mem-allocated-bytes" not in doc["left_out"]


def test_excluding_everything_or_a_series_with_nothing_to_compare_is_an_error(tmp_path: Path) -> None:
    run = megatron_run(tmp_path, wall_clock=0.123)
    result = run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON), "--exclude", "*")
    assert result.code == 2 and "nothing to compare: every one of the standard's 5 series is left out" in result.err
    assert "(5 by --exclude '*')" in result.err  # an explicit --exclude is named before the format's rule
    empty = GOLDENS / "synthetic" / "edge" / "megatron_all_nan_series.json"
    # taken back from the format's rule, an all-"nan" series has nothing to compare: an error
    with pytest.raises(InputError, match="series 'iteration-time' has no value to compare .every one of its 3 steps"):
        check_run(load_any(empty), run, include=("iteration-time",))
    # left out (by the rule, or --exclude), the rest is compared (the run's lm loss is not this golden's: a real verdict)
    assert check_run(load_any(empty), run).failures[0][0] == "lm loss"
    assert check_run(load_any(empty), run, exclude=("iteration-time",)).failures[0][0] == "lm loss"
    with pytest.raises(UsageError, match="nothing to compare"):
        check_run(load_any(empty), run, exclude=("*",))


def test_rename_from_the_card_maps_a_runs_series_to_the_standards(tmp_path: Path) -> None:
    run = loss_run(tmp_path, "loss_metrics/global_avg_loss")
    std = load_any(LOSSES)
    plain = check_run(std, run)
    assert [(n, d.kind) for n, d in plain.failures] == [("loss", "missing")]
    assert plain.extra_series == ["grad_norm", "loss_metrics/global_avg_loss"]
    card = load_card(write_card(tmp_path / "toy.toml", extra='rename = {"loss_metrics/global_avg_loss" = "loss"}\n'))
    renamed = check_run(std, run, card=card)
    assert renamed.failures == [] and renamed.renamed == {"loss_metrics/global_avg_loss": "loss"}
    assert renamed.extra_series == ["grad_norm"]
    changed = write_jsonl(tmp_path / "changed.jsonl", run.read_text().replace('"step": 3,', '"step": 30,').splitlines())
    [(name, divergence)] = check_run(std, changed, card=card).failures
    assert name == "loss" and divergence.step == 3  # the standard's name and step


@pytest.mark.slow
def test_the_text_report_lists_renames_and_the_runs_series_the_standard_lacks(tmp_path: Path) -> None:
    run = loss_run(tmp_path, "loss_metrics/global_avg_loss")
    failed = run_cli("verify", "--metrics", str(run), "--standard", str(LOSSES))
    assert failed.code == 1 and "loss: missing in the run" in failed.out, failed.text
    assert "note: 2 series not in the standard: grad_norm, loss_metrics/global_avg_loss" in failed.out
    std = load_any(LOSSES)
    own = tmp_path / "loss.detaudit.json"
    own.write_text(render_as(Standard(series=std.series, rename={"loss_metrics/global_avg_loss": "loss"},
                                      comparison="torchtitan"), "detaudit"))
    passed = run_cli("verify", "--metrics", str(run), "--standard", str(own))
    assert passed.code == 0, passed.text
    assert "renamed: loss_metrics/global_avg_loss -> loss" in passed.out
    assert "note: 1 series not in the standard: grad_norm" in passed.out


def test_renames_that_contradict_or_collide_are_errors(tmp_path: Path) -> None:
    std = Standard(series={"loss": SeriesData("loss", "", [1], [0.5])}, rename={"a": "loss"})
    card = load_card(write_card(tmp_path / "toy.toml", extra='rename = {"a" = "other"}\n'))
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps({"step_key": "s", "s": 1, "a": 0.5, "loss": 0.5})])
    with pytest.raises(InputError, match="'a' -> 'other', but the standard"):
        check_run(std, run, card=card)
    with pytest.raises(InputError, match="the run has both 'a' and 'loss'"):
        check_run(std, run)
    for text, words in (('rename = {"a" = "a"}', "'a' is renamed to itself"),
                        ('rename = {"a" = "x", "b" = "x"}', "'a' and 'b' are both renamed to 'x'"),
                        ('rename = {"a" = 1}', "rename must be a table of non-empty series names")):
        with pytest.raises(InputError, match=words) as err:
            load_card(write_card(tmp_path / "bad.toml", extra=text + "\n"))
        assert err.value.line == 6  # the line of the key (write_card writes five before it)


def test_suite_takes_no_selection(tmp_path: Path) -> None:
    result = run_cli("verify", "--suite", "cpu", "--exclude", "x")
    assert result.code == 2 and "--exclude" in result.err
