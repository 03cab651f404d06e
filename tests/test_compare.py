"""Exact comparison: every divergence kind, the root divergence, three runs, --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, write_jsonl

from detaudit.data.compare import classify, diff_runs
from detaudit.data.values import same_value, ulp_distance
from detaudit.data.metrics import read_metrics
from detaudit.render.diff import root_summary

BASE = [
    '{"step_key": "rollout/step", "rollout/step": 0, "rollout/r": 0.5, "rollout/n": 8}',
    '{"step_key": "train/step", "train/step": 1.0, "train/loss": 1.25, "train/g": NaN, "train/z": 0.0}',
    '{"step_key": "rollout/step", "rollout/step": 1, "rollout/r": 0.625, "rollout/n": 8}',
    '{"step_key": "train/step", "train/step": 2.0, "train/loss": 1.125, "train/g": 2.0, "train/z": 0.0}',
]


def diff_of(tmp_path: Path, *variants: list[str]):
    paths = [write_jsonl(tmp_path / f"run{i}.jsonl", lines) for i, lines in enumerate(variants)]
    return diff_runs([read_metrics(p) for p in paths])


def replace(lines: list[str], index: int, old: str, new: str) -> list[str]:
    out = list(lines)
    assert old in out[index]
    out[index] = out[index].replace(old, new)
    return out


def test_identical_runs(tmp_path: Path) -> None:
    report = diff_of(tmp_path, BASE, BASE)
    assert report.ok and len(report.compared) == 5 and report.identical == sorted(report.compared)


@pytest.mark.parametrize(
    ("index", "old", "new", "series", "kind"),
    [
        (2, '"rollout/r": 0.625', '"rollout/r": 0.6250000000000001', "rollout/r", "close"),
        (2, '"rollout/r": 0.625', '"rollout/r": 0.75', "rollout/r", "value"),
        (3, '"train/g": 2.0', '"train/g": NaN', "train/g", "nan"),
        (1, '"train/g": NaN', '"train/g": 0.5', "train/g", "nan"),
        (1, '"train/z": 0.0', '"train/z": -0.0', "train/z", "signed-zero"),
        (0, '"rollout/n": 8', '"rollout/n": 8.0', "rollout/n", "type"),
        (0, '"rollout/n": 8', '"rollout/n": null', "rollout/n", "type"),
        (2, '"rollout/n": 8', '"rollout/n": 9', "rollout/n", "value"),
        (3, '"train/step": 2.0', '"train/step": 3.0', "train/loss", "steps"),
    ],
)
def test_each_kind(tmp_path: Path, index: int, old: str, new: str, series: str, kind: str) -> None:
    report = diff_of(tmp_path, BASE, replace(BASE, index, old, new))
    by_name = {m.series: m for m in report.mismatched}
    assert by_name[series].kind == kind
    assert report.root is not None


def test_missing_and_extra_points(tmp_path: Path) -> None:
    dropped = [line.replace(', "train/z": 0.0', "") if i == 3 else line for i, line in enumerate(BASE)]
    extra = BASE + ['{"step_key": "train/step", "train/step": 3.0, "train/loss": 1.0, "train/g": 1.0, "train/z": 0.0}']
    renamed = [line.replace('"rollout/n"', '"rollout/count"') for line in BASE]
    report = diff_of(tmp_path, BASE, dropped)
    z = next(m for m in report.mismatched if m.series == "train/z")
    assert z.kind == "steps" and z.first.len_a == 2 and z.first.len_b == 1
    report = diff_of(tmp_path, BASE, extra)
    assert {m.series: m.kind for m in report.mismatched} == {"train/loss": "steps", "train/g": "steps", "train/z": "steps"}
    report = diff_of(tmp_path, BASE, renamed)
    assert {m.series: m.kind for m in report.mismatched} == {"rollout/n": "missing", "rollout/count": "missing"}


def test_root_divergence_names_what_was_identical_before(tmp_path: Path) -> None:
    b = replace(BASE, 1, '"train/loss": 1.25', '"train/loss": 1.2500000000000002')
    b = replace(b, 2, '"rollout/r": 0.625', '"rollout/r": 0.7')
    report = diff_of(tmp_path, BASE, b)
    assert report.root is not None
    assert (report.root.series, report.root.step, report.root.line) == ("train/loss", 1.0, 2)
    assert report.root.identical_through == {"rollout/step": 0}
    summary = root_summary(report.root)
    assert "rollout/step through 0" in summary and "train/loss" in summary
    assert [m.series for m in report.mismatched] == ["train/loss", "rollout/r"]  # emission order


def test_three_runs_each_against_the_first(tmp_path: Path) -> None:
    c = replace(BASE, 2, '"rollout/r": 0.625', '"rollout/r": 0.5')
    report = diff_of(tmp_path, BASE, BASE, c)
    (m,) = report.mismatched
    assert m.series == "rollout/r" and m.disagreeing_runs == [2] and m.values == [0.625, 0.625, 0.5]


def test_float_helpers() -> None:
    assert same_value(float("nan"), float("nan"))
    assert not same_value(0.0, -0.0)
    assert not same_value(1, 1.0) and not same_value(True, 1)
    assert ulp_distance(1.0, 1.0000000000000002) == 1
    assert ulp_distance(-0.0, 0.0) == 0
    assert ulp_distance(-5e-324, 5e-324) == 2
    assert classify(1.0, 1.0 + 1e-9) == "close" and classify(1.0, 1.001) == "value"
    assert classify(float("inf"), 1.0) == "value" and classify("a", "b") == "value"


def test_cli_json_report(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [line.replace("}", ', "perf/t": 1.5}') for line in BASE])
    b = write_jsonl(tmp_path / "b.jsonl", replace(BASE, 3, '"train/loss": 1.125', '"train/loss": 1.5'))
    result = run_cli("diff", "--json", str(a), str(b))
    assert result.code == 1, result.text
    doc = json.loads(result.out)
    assert doc["compared"] == 5 and len(doc["identical"]) == 4
    (m,) = doc["mismatched"]
    assert (m["series"], m["step"], m["values"], m["kind"]) == ("train/loss", 2.0, [1.125, 1.5], "value")
    assert doc["root"] == {**doc["root"], "series": "train/loss", "step": 2.0}
    assert doc["excluded"] == {"perf/t": "default wall-clock pattern 'perf/*'"}
    # The same inputs give byte-identical reports.
    assert run_cli("diff", "--json", str(a), str(b)).out == result.out


@pytest.mark.slow
def test_cli_table_report_and_exit_codes(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", BASE)
    b = write_jsonl(tmp_path / "b.jsonl", replace(BASE, 2, '"rollout/r": 0.625', '"rollout/r": 0.6250000000000001'))
    same = run_cli("diff", str(a), str(a))
    assert same.code == 0 and "5 / 5 identical, 0 mismatched" in same.out
    result = run_cli("diff", str(a), str(b))
    assert result.code == 1
    assert "4 / 5 identical, 1 mismatched" in result.out
    assert "close (rel <= 1e-06)" in result.out and "0.6250000000000001" in result.out and "root divergence" in result.out
    assert run_cli("diff", str(a), str(b)).out == result.out
    assert run_cli("diff", str(a)).code == 2
    excluded = run_cli("diff", "--exclude", "rollout/*", str(a), str(b))
    assert excluded.code == 0 and "excluded (2)" in excluded.out
    included = run_cli("diff", "--include", "perf/*", str(a), str(a))
    assert included.code == 0


def test_series_points_refuse_steps_and_values_of_two_lengths() -> None:
    """A series' steps and values pair up one to one: a mismatch raises instead of truncating."""
    from detaudit.data.compare import SeriesData

    assert list(SeriesData("loss", "step", [1, 2], [0.5, 0.25]).points()) == [(1, 0.5), (2, 0.25)]
    with pytest.raises(ValueError):
        list(SeriesData("loss", "step", [1, 2, 3], [0.5, 0.25]).points())
