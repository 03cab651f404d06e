"""detaudit health: first/last means, buckets, worst drops and recovery, the PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_cli, write_jsonl

from detaudit.errors import InputError
from detaudit.data.health import curve_health

VALUES = [0.5, 0.6, 0.4, 0.7, math.nan, 0.65, 0.8, 0.75, 0.9, 0.95]


def metrics(tmp_path: Path) -> Path:
    lines = [json.dumps({"step_key": "rollout/step", "rollout/step": i, "rollout/reward/raw_mean": v,
                         "perf/rollout_time": 1.0}) for i, v in enumerate(VALUES)]
    return write_jsonl(tmp_path / "m.jsonl", lines)


def test_report_numbers(tmp_path: Path) -> None:
    report = curve_health(metrics(tmp_path), "rollout/reward/raw_mean", window=3, buckets=3, worst=2)
    finite = [v for v in VALUES if not math.isnan(v)]
    assert report.skipped == 1 and len(report.values) == 9
    assert report.first_mean == pytest.approx(sum(finite[:3]) / 3)
    assert report.last_mean == pytest.approx(sum(finite[-3:]) / 3)
    assert report.delta == pytest.approx(report.last_mean - report.first_mean)
    assert [(a, b) for a, b, _ in report.buckets] == [(0, 2), (3, 6), (7, 9)]
    assert [(d.step, d.recovered) for d in report.drops] == [(2, True), (7, True)]  # 0.6->0.4, 0.8->0.75
    assert report.drops[0].size == pytest.approx(0.2)


def test_drop_that_does_not_recover_and_last_point(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps({"r": v}) for v in (1.0, 0.5, 0.6, 0.2)])
    report = curve_health(path, "r", window=1)
    assert [(d.step, d.recovered) for d in report.drops] == [(1, False), (3, None)]


@pytest.mark.slow
def test_cli_prints_and_plots(tmp_path: Path) -> None:
    path = metrics(tmp_path)
    result = run_cli("health", str(path), "--metric", "rollout/reward/raw_mean", "--window", "3")
    assert result.code == 0, result.text
    assert "mean of first 3" in result.out and "worst single-step drops" in result.out
    png = tmp_path / "m.rollout_reward_raw_mean.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(run_cli("health", str(path), "--metric", "rollout/reward/raw_mean", "--json", "--no-png").out)
    assert doc["points"] == 9 and doc["skipped"] == 1 and doc["png"] is None


def test_unknown_metric_is_an_input_error(tmp_path: Path) -> None:
    path = metrics(tmp_path)
    with pytest.raises(InputError, match="no series 'nope'"):
        curve_health(path, "nope")
    result = run_cli("health", str(path), "--metric", "nope")
    assert result.code == 2 and "m.jsonl: no series 'nope'" in result.err
