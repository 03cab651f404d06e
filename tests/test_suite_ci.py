"""Suites (`detaudit plan`, `verify --suite`), est_time warnings, JUnit XML and GitHub job summaries."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import run_cli, write_card


def cards_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "cards"
    folder.mkdir()
    write_card(folder / "a.toml", name="a", extra='suite = "toy"\nest_time = 0.001\n')
    write_card(folder / "b.toml", name="b", extra='suite = "toy"\nest_time = 120\ngpus_per_run = 0\n')
    write_card(folder / "c.toml", name="c", extra='suite = "other"\n')
    return folder


def test_plan_lists_suite_and_checks_the_budget(tmp_path: Path) -> None:
    folder = cards_dir(tmp_path)
    ok = run_cli("plan", "--cards", str(folder), "--suite", "toy", "--budget", "200")
    assert ok.code == 0, ok.text
    assert "total: 120s for 2 cards" in ok.out and "within the budget of 200s (80s to spare)" in ok.out
    over = run_cli("plan", "--cards", str(folder), "--suite", "toy", "--budget", "100")
    assert over.code == 1 and "OVER BUDGET: 120s > 100s" in over.out
    unknown = run_cli("plan", "--cards", str(folder), "--budget", "1000")
    assert unknown.code == 1 and "c" in unknown.out and "have no est_time" in unknown.out  # fail closed
    doc = json.loads(run_cli("plan", "--cards", str(folder), "--json").out)
    assert [c["name"] for c in doc["cards"]] == ["a", "b", "c"] and doc["unknown_est_time"] == ["c"]
    assert doc["fits"] is None
    none = run_cli("plan", "--cards", str(folder), "--suite", "nope")
    assert none.code == 2 and "no card in suite 'nope' (suites here: other, toy)" in none.err


def test_verify_suite_one_table_one_exit_code_junit_and_summary(tmp_path: Path) -> None:
    folder = cards_dir(tmp_path)
    assert run_cli("record", str(folder / "a.toml"), "--runs", "2").code == 0
    # b's standard has a 4th step; its card runs 3: it must fail, with its first divergences.
    assert run_cli("record", str(folder / "b.toml"), "--runs", "2", "--", "--steps", "4").code == 0
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = run_cli("verify", "--suite", "toy", "--cards", str(folder), "--junit-xml", str(junit),
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1, result.text
    assert "PASSED" in result.out and "FAILED" in result.out and "1 of 2 cards passed" in result.out
    assert "a: the run took" in result.err and "over the card's est_time" in result.err  # est_time 0.001 s
    assert "b: the run took" not in result.err
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["b"].find("failure")
    assert cases["a"].find("failure") is None and failure is not None
    assert "points in the standard" in failure.text and "rollout/reward/raw_mean" in failure.text
    text = summary.read_text()
    assert text.startswith("earlier step\n### detaudit verify --suite toy")  # appended, not replaced
    assert "| ❌ failed | `b` |" in text and "| ✅ passed | `a` |" in text
    bad = run_cli("verify", "--suite", "toy", str(folder / "a.toml"))
    assert bad.code == 2 and "--suite verifies the suite's cards" in bad.err


def test_single_verify_junit_has_a_case_per_series(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    assert run_cli("record", str(card), "--runs", "2").code == 0
    junit = tmp_path / "v.xml"
    failed = run_cli("verify", str(card), "--junit-xml", str(junit), "--", "--unseeded")
    assert failed.code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    names = sorted(c.get("name") for c in suite.iter("testcase"))
    assert names == ["rollout/reward/raw_mean", "rollout/reward/raw_num_samples", "train/grad_norm", "train/loss"]
    assert suite.get("failures") == "3"
    failing = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert all("step 0" in c.find("failure").text for c in failing if c.get("name").startswith("rollout"))


def test_record_junit_and_summary_name_disagreeing_series(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    junit, summary = tmp_path / "r.xml", tmp_path / "s.md"
    result = run_cli("record", str(card), "--runs", "2", "--junit-xml", str(junit), "--", "--unseeded",
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "3"
    assert "disagree: 1 of 4 series identical across 2 runs" in summary.read_text()
    assert "| ❌ failed | `train/loss` | train/loss: step 0.0: run 1 " in summary.read_text()
