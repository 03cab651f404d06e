"""Suites (`detaudit plan`, `verify --suite`), est_time warnings, JUnit XML and GitHub job summaries.

Every JUnit file written here is validated against Jenkins' junit-10.xsd (tests/data), the
schema CI readers hold reports to.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lxml import etree
from markdown_it import MarkdownIt

from conftest import REPO, TOY, given_toy_standard, run_cli, write_card

from detaudit.render.ci import Case, summary_markdown

JUNIT_SCHEMA = etree.XMLSchema(etree.parse(str(REPO / "tests" / "data" / "junit-10.xsd")))


def valid_junit(path: Path) -> ET.Element:
    """The JUnit file's root, after checking it against the common JUnit schema."""
    doc = etree.parse(str(path))
    assert JUNIT_SCHEMA.validate(doc), f"{path}: {JUNIT_SCHEMA.error_log}"
    return ET.parse(path).getroot()


def cards_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "cards"
    folder.mkdir()
    write_card(folder / "a.toml", name="a", extra='suite = "toy"\nest_time = 0.001\n')
    write_card(folder / "b.toml", name="b", extra='suite = "toy"\nest_time = 120\ngpus_per_run = 0\n')
    write_card(folder / "c.toml", name="c", extra='suite = "other"\n')
    return folder


@pytest.mark.slow
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


@pytest.mark.slow
def test_verify_suite_one_table_one_exit_code_junit_and_summary(tmp_path: Path) -> None:
    folder = cards_dir(tmp_path)
    assert run_cli("record", str(folder / "a.toml"), "--runs", "2", "--no-doctor").code == 0
    # b's standard has a 4th step; its card runs 3: it must fail, with its first divergences.
    assert run_cli("record", str(folder / "b.toml"), "--runs", "2", "--no-doctor", "--", "--steps", "4").code == 0
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = run_cli("verify", "--suite", "toy", "--cards", str(folder), "--junit-xml", str(junit),
                     "--workdir", str(tmp_path / "runs"), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1, result.text
    assert "PASSED" in result.out and "FAILED" in result.out and "1 of 2 cards passed" in result.out
    # --workdir: each card's run under its file's stem, kept whether it passed (a) or failed (b)
    assert sorted(p.relative_to(tmp_path / "runs").as_posix() for p in (tmp_path / "runs").glob("*/run1/metrics.jsonl")) \
        == ["a/run1/metrics.jsonl", "b/run1/metrics.jsonl"]
    assert "a: the run took" in result.err and "over the card's est_time" in result.err  # est_time 0.001 s
    assert "b: the run took" not in result.err
    root = valid_junit(junit)
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["b"].find("failure")
    assert cases["a"].find("failure") is None and failure is not None
    assert "points in the standard" in failure.text and "rollout/reward/raw_mean" in failure.text
    text = summary.read_text()
    assert text.startswith("earlier step\n### `detaudit verify --suite toy`")  # appended, not replaced
    assert "| ❌ failed | `b` |" in text and "| ✅ passed | `a` |" in text
    bad = run_cli("verify", "--suite", "toy", str(folder / "a.toml"))
    assert bad.code == 2 and "--suite verifies the suite's cards" in bad.err


@pytest.mark.slow
def test_single_verify_junit_has_a_case_per_series(tmp_path: Path, toy_standard: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    given_toy_standard(card, toy_standard)  # as `record CARD --runs 2` leaves it
    junit = tmp_path / "v.xml"
    failed = run_cli("verify", str(card), "--junit-xml", str(junit), "--", "--unseeded")
    assert failed.code == 1
    suite = valid_junit(junit).find("testsuite")
    names = sorted(c.get("name") for c in suite.iter("testcase"))
    assert names == ["rollout/reward/raw_mean", "rollout/reward/raw_num_samples", "train/grad_norm", "train/loss"]
    assert suite.get("failures") == "3"
    failing = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert all("step 0" in c.find("failure").text for c in failing if c.get("name").startswith("rollout"))


@pytest.mark.slow
def test_record_junit_and_summary_name_disagreeing_series(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    junit, summary = tmp_path / "r.xml", tmp_path / "s.md"
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--junit-xml", str(junit), "--", "--unseeded",
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1
    suite = valid_junit(junit).find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "3"
    assert "**DISAGREE** `1 of 4 series identical across 2 runs`" in summary.read_text()
    assert "| ❌ failed | `train/loss` | `train/loss: step 0.0: run 1 " in summary.read_text()


def metrics_and_standard(tmp_path: Path, names: list[str], differ: str | None = None) -> tuple[Path, Path]:
    """A metrics file and a miles-format standard of the same series; ``differ`` is one step off."""
    lines = [{"step": step, **{name: step + 0.5 for name in names}} for step in range(2)]
    metrics = tmp_path / "run.jsonl"
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    standard = tmp_path / "standard.json"
    series = {name: [[step, step + (0.25 if name == differ and step else 0.5)] for step in range(2)] for name in names}
    standard.write_text(json.dumps({"metrics": series}))
    return metrics, standard


@pytest.mark.slow
def test_reports_on_bad_input_hold_one_error_case(tmp_path: Path) -> None:
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    # An error found while the command runs (the metrics file is missing) ...
    missing = run_cli("verify", "--metrics", str(tmp_path / "run.jsonl"), "--standard", str(tmp_path / "nope.json"),
                      "--junit-xml", str(junit), env=env)
    assert missing.code == 2 and missing.err.count("\n") == 1 and "nope.json: standard file not found" in missing.err
    suite = valid_junit(junit).find("testsuite")
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    error = suite.find("testcase").find("error")
    assert "nope.json: standard file not found" in error.get("message") and "Traceback" not in error.text
    assert suite.get("name") == f"detaudit verify {tmp_path / 'run.jsonl'}"
    assert "**ERROR**" in summary.read_text() and "standard file not found" in summary.read_text()
    # ... a usage error in the command's body, and one found while parsing the options.
    for args, reason in ((("record", "--no-write", "--update"), "--no-write writes nothing"),
                         (("record", "--runs", "1"), "Invalid value for '--runs'")):
        junit.unlink()
        result = run_cli(args[0], "--junit-xml", str(junit), *args[1:], env=env)
        assert result.code == 2 and reason in result.err, result.text
        assert reason in valid_junit(junit).find("testsuite/testcase/error").get("message")
        assert summary.read_text().count("**ERROR**") == (2 if "--update" in args else 3)


@pytest.mark.slow
def test_interrupted_verify_writes_its_reports(tmp_path: Path, toy_standard: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    given_toy_standard(card, toy_standard)  # as `record CARD --runs 2` leaves it
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(summary))
    proc = subprocess.Popen([sys.executable, "-m", "detaudit", "verify", str(card), "--junit-xml", str(junit), "--",
                             "--sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        for line in proc.stderr:  # the run has started: interrupt it, as Ctrl-C or a cancelled job does
            seen.append(line)
            if "run 1/1 running" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    report = "".join(seen) + err + (junit.read_text() if junit.exists() else "(no JUnit file)")
    assert proc.returncode == 1 and "interrupted (SIGINT)" in err, report
    error = valid_junit(junit).find("testsuite/testcase/error")
    assert error is not None and error.get("message") == "interrupted: not verified", report
    assert "**INTERRUPTED**" in summary.read_text()


def test_an_unfit_step_summary_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """GITHUB_STEP_SUMMARY naming a folder or a path through a file: exit 2 before anything runs, one
    line, the JUnit report of the refusal written (its own path is fine), the summary not."""
    metrics, standard = metrics_and_standard(tmp_path, ["train/loss"])
    junit = tmp_path / "junit.xml"
    for target, why in ((tmp_path, "is a directory"),
                        (Path("/etc/hostname/summary.md"),
                         "cannot write the step summary (GITHUB_STEP_SUMMARY): a part of its path is a file")):
        result = run_cli("verify", "--metrics", str(metrics), "--standard", str(standard), "--junit-xml", str(junit),
                         env={"GITHUB_STEP_SUMMARY": str(target)})
        assert result.code == 2, result.text
        assert result.err == f"detaudit: error: {target}: {why}" + result.err.split(why, 1)[1]
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
        error = valid_junit(junit).find("testsuite/testcase/error")
        assert error is not None and why in error.get("message")


@pytest.mark.slow
def test_names_xml_cannot_carry_are_escaped_and_reported(tmp_path: Path) -> None:
    metrics, standard = metrics_and_standard(tmp_path, ["train\x1bloss", "ok\x00"], differ="train\x1bloss")
    junit = tmp_path / "junit.xml"
    result = run_cli("verify", "--metrics", str(metrics), "--standard", str(standard), "--junit-xml", str(junit))
    assert result.code == 1, result.text
    suite = valid_junit(junit).find("testsuite")
    assert sorted(c.get("name") for c in suite.iter("testcase")) == ["ok\\x00", "train\\x1bloss"]
    assert "train\\x1bloss: step 1" in suite.find("testcase/failure").get("message")
    assert f'warning: {junit}: name "train\\x1bloss" holds characters XML cannot carry' in result.err
    assert f'warning: {junit}: name "ok\\x00" holds characters XML cannot carry' in result.err


HOSTILE = ["# heading", "[a link](https://evil.example)", "a|b", "<img src=x onerror=alert(1)>", "``tick` `",
           "two\nlines", "| --- |", "**bold** _em_", "https://autolink.example", "\\", "trail `"]


def test_step_summary_reads_no_markdown_or_html_out_of_a_name() -> None:
    cases = [Case("c", name, "failed" if i % 2 else "passed", 0.0, f"{name}: step 0" if i % 2 else "")
             for i, name in enumerate(HOSTILE)]
    text = summary_markdown("detaudit verify <b>card</b> [x](y)", cases, "FAILED", "# detail [z](w) |")
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    html = MarkdownIt("commonmark").enable("table").render(text)
    kinds = [t.type for t in tokens]
    assert kinds.count("heading_open") == 1 and kinds.count("table_open") == 1
    assert "<a " not in html and "<img" not in html and "<b>" not in html and "<em>" not in html
    assert html.count("<strong>") == 1  # the verdict, ours
    rows = [t for t in tokens if t.type == "tr_open"]
    assert len(rows) == 1 + len(HOSTILE)  # header + one row per case: no row broken, none added
    cells = [t for t in tokens if t.type == "inline" and t.map is not None and t.map[0] > 4]
    names = [cells[i].children for i in range(1, len(cells), 3)]  # the name column
    for name, children in zip([c.name for c in cases if not c.ok] + [c.name for c in cases if c.ok], names):
        assert [c.type for c in children] == ["code_inline"], name
        assert children[0].content.replace("\\|", "|") == name.replace("\n", "\\n")


def approximate_suite(tmp_path: Path) -> Path:
    """Card `toy` with a standard recorded on class cpu-ref, then verified as cpu-other within tolerances."""
    folder = tmp_path / "cards"
    folder.mkdir()
    command = json.dumps(["{python}", str(TOY)])
    base = f'name = "toy"\ncommand = {command}\ntimeout_s = 60\nstandards_dir = "{folder / "standards"}"\n' \
           'suite = "toy"\n'
    card = folder / "toy.toml"
    card.write_text(base + 'runner = ["cpu", "ref"]\n')
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor").code == 0
    card.write_text(base + 'runner = ["cpu", "other"]\n[approximate."cpu-other"]\nagainst = "cpu-ref"\n'
                    '"train/*" = { rtol = 1e-12 }\n')
    return folder


@pytest.mark.slow
def test_approximate_pass_is_a_pass_marked_approximate_everywhere(tmp_path: Path) -> None:
    folder = approximate_suite(tmp_path)
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    result = run_cli("verify", "--suite", "toy", "--cards", str(folder), "--junit-xml", str(junit),
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 0, result.text
    assert "1 of 1 cards passed (1 approximate)" in result.out and "FAILED" not in result.out
    suite = valid_junit(junit).find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0")
    case = suite.find("testcase")
    assert case.find("failure") is None and "PASSED (approximate)" in case.find("system-out").text
    text = summary.read_text()
    assert "**PASSED** `1 of 1 cards passed (1 approximate)`" in text and "| ✅ passed (approximate) | `toy` |" in text
    single = run_cli("verify", str(folder / "toy.toml"), "--junit-xml", str(junit))
    assert single.code == 0, single.text
    cases = list(valid_junit(junit).iter("testcase"))
    assert len(cases) == 4 and not any(c.find("failure") is not None for c in cases)
    assert all("identical to the cpu-ref standard (approximate: another runner class)" in c.find("system-out").text
               for c in cases)


@pytest.mark.slow
def test_not_verified_on_a_new_runner_class_says_how_to_go_on(tmp_path: Path, toy_standard: Path) -> None:
    """The first run on a runner class without a standard: the reports name the way forward."""
    card = write_card(tmp_path / "toy.toml")
    given_toy_standard(card, toy_standard)  # as `record CARD --runs 2` leaves it
    card.write_text(card.read_text().replace('runner = ["cpu", "test"]', 'runner = ["cpu", "hosted"]'))
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    result = run_cli("verify", str(card), "--junit-xml", str(junit), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1 and "NOT VERIFIED" in result.out, result.text
    failure = valid_junit(junit).find("testsuite/testcase/failure")
    for text in (failure.get("message"), summary.read_text()):
        assert "no standard for runner class cpu-hosted" in text
        assert "record a standard on this runner class (detaudit record CARD" in text
        assert "the workflow's record job uploads it as an artifact" in text and "--allow-other-runner" in text


def test_left_out_series_are_reported_as_left_out_everywhere(tmp_path: Path) -> None:
    """verify --exclude: the series it leaves out are skipped (with the reason) in JUnit, the step
    summary, the JSON, the text and the page; never passed."""
    metrics, standard = metrics_and_standard(tmp_path, ["train/loss", "debug/a", "debug/b"])
    junit, summary, page = tmp_path / "j.xml", tmp_path / "s.md", tmp_path / "p.html"
    args = ("verify", "--metrics", str(metrics), "--standard", str(standard), "--exclude", "debug/*")
    result = run_cli(*args, "--junit-xml", str(junit), "--html", str(page), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 0, result.text
    suite = valid_junit(junit).find("testsuite")
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("3", "2", "0")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    for name in ("debug/a", "debug/b"):
        skipped = cases[name].find("skipped")
        assert skipped is not None and "left out of the comparison" in skipped.get("message")
        assert "--exclude 'debug/*'" in skipped.get("message") or "debug/*" in skipped.get("message")
    assert cases["train/loss"].find("skipped") is None
    text = summary.read_text()
    assert "| ⏭️ skipped | `debug/a` | `left out of the comparison:" in text
    assert "| ✅ passed | `debug/a`" not in text and "| ✅ passed | `train/loss` |" in text
    assert "left out (2" in result.out and "debug/a" in result.out
    doc = json.loads(run_cli(*args, "--json").out)
    assert sorted(doc["left_out"]) == ["debug/a", "debug/b"] and doc["compared"] == 1
    html_text = page.read_text()
    left = re.findall(r'<tr data-left-out="([^"]+)">', html_text)
    assert left == ["debug/a", "debug/b"] and "left out of the comparison: none" not in html_text
    identical = re.search(r'<section id="identical">(.*?)</section>', html_text, re.S).group(1)
    assert "debug/a" not in identical and "train/loss" in identical
    # many left out: folded into one count line of their own, never counted as passed
    many = [f"debug/{i:02d}" for i in range(40)]
    metrics, standard = metrics_and_standard(tmp_path, ["train/loss", *many])
    summary.unlink()
    result = run_cli("verify", "--metrics", str(metrics), "--standard", str(standard), "--exclude", "debug/*",
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 0 and "| ⏭️ skipped | 40 more | |" in summary.read_text(), summary.read_text()
