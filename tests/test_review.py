"""Reviewing a change to a standard: `detaudit standard diff` / `show`, and what record --update prints."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from detaudit.data.compare import SeriesData
from detaudit.standards.formats import load_any, render_as
from detaudit.render.review import change_line, review_lines
from detaudit.standards.diff import diff_standards
from detaudit.standards.standard import Standard

from conftest import run_cli


def std(**series) -> Standard:
    return Standard(series={n.replace("_", "/"): SeriesData(n.replace("_", "/"), "", s, v) for n, (s, v) in series.items()})


OLD = std(train_loss=([1, 2, 3, 4], [0.5, 0.25, 0.125, 1.0]), train_lr=([1, 2], [1e-4, 1e-4]), gone=([1], [3]))
NEW = std(train_loss=([2, 3, 4, 5], [0.25, 0.12500000000000003, 1.5, 2.0]), train_lr=([1, 2], [1e-4, 1e-4]), new=([1], [3]))


def test_diff_reports_each_kind_of_change() -> None:
    review = diff_standards(OLD, NEW)
    by = {c.name: c for c in review.series}
    assert by["gone"].status == "removed" and by["new"].status == "added"
    assert by["train/lr"].status == "identical"
    loss = by["train/loss"]
    assert loss.status == "changed" and loss.steps_added == [5] and loss.steps_removed == [1]
    assert loss.differing == 2 and loss.first_step == 3 and loss.kind == "close"
    assert loss.first_old == 0.125 and loss.first_new == 0.12500000000000003
    assert loss.max_abs == 0.5 and math.isclose(loss.max_rel, 0.5 / 1.5) and loss.max_ulps > 1 << 40
    line = change_line(loss)
    assert "2 of 4 common points differ from step 3 (close): 0.125 -> 0.12500000000000003" in line
    assert "steps added: 5" in line and "steps removed: 1" in line
    assert not review.identical and diff_standards(OLD, OLD).identical


def test_signed_zero_and_type_are_changes() -> None:
    review = diff_standards(std(x=([1, 2], [0.0, 1])), std(x=([1, 2], [-0.0, 1.0])))
    change = review.series[0]
    assert change.differing == 2 and change.kind == "signed-zero" and change.max_abs == 0.0


@pytest.mark.slow
def test_cli_standard_diff_and_show(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(render_as(OLD, "detaudit"))
    new.write_text(render_as(NEW, "nemo"))  # any two formats
    result = run_cli("standard", "diff", str(old), str(new))
    assert result.code == 1, result.text
    assert "series: 1 changed, 1 added, 1 removed, 1 identical; fields: comparison differ" in result.out
    assert "changed: comparison: 'detaudit' -> 'nemo'" in result.out  # exact vs NeMo's rule: not the same standard
    assert "train/loss" in result.out and "0.125 -> 0.12500000000000003" in result.out
    doc = json.loads(run_cli("standard", "diff", str(old), str(new), "--json").out)
    assert doc["counts"] == {"added": 1, "removed": 1, "changed": 1, "identical": 1}
    assert doc["fields"] == [{"field": "comparison", "more": 0,
                              "paths": [{"path": "comparison", "old": "detaudit", "new": "nemo"}]}]
    loss = next(s for s in doc["series"] if s["series"] == "train/loss")
    assert loss["steps_added"] == [5] and loss["first_step"] == 3 and loss["max_abs_diff"] == 0.5
    same = run_cli("standard", "diff", str(old), str(old))
    assert same.code == 0 and "0 changed, 0 added, 0 removed, 3 identical" in same.out
    shown = run_cli("standard", "show", str(new))
    assert shown.code == 0 and "nemo standard, 3 series, 7 points" in shown.out
    info = json.loads(run_cli("standard", "show", str(old), "--json").out)
    assert [r["points"] for r in info["series"]] == [1, 4, 2]
    missing = run_cli("standard", "show", str(tmp_path / "nope.json"))
    assert missing.code == 2 and "standard file not found" in missing.err


def test_fields_beyond_the_points_are_changes(tmp_path: Path) -> None:
    base = Standard(series={"loss": SeriesData("loss", "", [1, 2], [0.5, 0.25])}, format="miles",
                    meta={"commit": "abc", "source": "t"})
    review = diff_standards(base, Standard(series=base.series, format="miles"))
    assert not review.identical and [f.name for f in review.fields] == ["meta"]
    lines = review_lines(review)
    assert "changed: meta: meta.commit: 'abc' -> absent; meta.source: 't' -> absent" in lines
    assert lines[-1] == "series: 0 changed, 0 added, 0 removed, 1 identical; fields: meta differ"
    keyed = Standard(series={"loss": SeriesData("loss", "train/step", [1, 2], [0.5, 0.25])}, format="miles",
                     meta=base.meta)
    [change] = diff_standards(base, keyed).series
    assert change.status == "changed" and change_line(change) == "changed: loss: step key '' -> 'train/step'"
    megatron = tmp_path / "g.json"
    megatron.write_text('{"lm loss": {"start_step": 1, "end_step": 5, "step_interval": 4, "values": {"1": 10.5, "5": "nan"}}}')
    golden = load_any(megatron)
    lost = diff_standards(golden, dataclasses.replace(golden, native={}))
    assert not lost.identical and "native.series" in review_lines(lost)[0]
