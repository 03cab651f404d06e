"""record and verify fail closed: fresh run dirs, no empty standards, signals, files kept honest.

Real runs of the toy recipe through the installed CLI (no mocks).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TOY, given_toy_standard, pid_alive, run_cli, standard_of, write_card

pytestmark = pytest.mark.slow  # every test here records or runs a card


def test_a_reused_workdir_is_refused_and_a_run_without_metrics_fails(toy_card: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--workdir", str(runs)).code == 0
    again = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--workdir", str(runs))
    assert again.code == 2 and f"run dir {runs / 'run1'} is not empty" in again.err and len(again.err.splitlines()) == 1
    first = run_cli("verify", str(toy_card), "--workdir", str(tmp_path / "v"))
    assert first.code == 0 and "PASSED" in first.out
    # The same work dir again: the earlier run's metrics must not be read as this run's.
    reused = run_cli("verify", str(toy_card), "--workdir", str(tmp_path / "v"), "--", "--no-metrics")
    assert reused.code == 2 and "is not empty" in reused.err and "PASSED" not in reused.out
    nometrics = run_cli("verify", str(toy_card), "--workdir", str(tmp_path / "w"), "--", "--no-metrics")
    assert nometrics.code == 2 and "PASSED" not in nometrics.out
    assert "run 1 exited 0 but wrote no metrics" in nometrics.err and "$DETAUDIT_METRICS_JSONL" in nometrics.err
    errors = [line for line in nometrics.err.splitlines() if line.startswith("detaudit: error: ")]
    assert len(errors) == 1 and "metrics_env" in errors[0] and "Traceback" not in nometrics.err
    before = standard_of(toy_card).read_text()
    recorded = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--", "--no-metrics")
    assert recorded.code == 2 and "wrote no metrics" in recorded.err and "RECORDED" not in recorded.out
    assert standard_of(toy_card).read_text() == before
    assert not Path(str(standard_of(toy_card)) + ".lock").exists()


def test_a_standard_with_no_series_is_refused(toy_card: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--", "--only-perf")
    assert result.code == 1, result.text
    assert "no standard written: no metric series left to compare (1 excluded: perf/rollout_time)" in result.out
    assert not (toy_card.parent / "standards").exists()  # nor an empty standards/ dir


def test_card_and_command_line_exclude_and_include(tmp_path: Path) -> None:
    card = write_card(tmp_path / "c.toml", extra='exclude = ["train/loss"]\n')
    out = tmp_path / "s.json"
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--exclude", "train/grad_norm", "--out", str(out))
    assert result.code == 0, result.text
    doc = json.loads(out.read_text())
    assert sorted(doc["series"]) == ["rollout/reward/raw_mean", "rollout/reward/raw_num_samples"]
    assert doc["excluded"]["series"]["train/loss"] == "card exclude 'train/loss'"
    assert doc["excluded"]["series"]["train/grad_norm"] == "--exclude 'train/grad_norm'"
    card = write_card(tmp_path / "i.toml", extra='include = ["perf/rollout_time"]\n')
    both = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--no-write", "--include", "perf/step_time")
    assert both.code == 1, both.text
    assert "mismatched: perf/rollout_time, perf/step_time" in both.out and "runs disagree: nothing written" in both.out


def test_update_keeps_format_mode_and_symlink(toy_card: Path, tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    old_mask = os.umask(0o022)
    try:
        result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--format", "miles", "--out", str(real))
    finally:
        os.umask(old_mask)
    assert result.code == 0, result.text
    assert stat.S_IMODE(real.stat().st_mode) == 0o644
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    updated = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--out", str(link), "--", "--steps", "4")
    assert updated.code == 0, updated.text
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    doc = json.loads(real.read_text())
    assert set(doc) == {"meta", "metrics"} and len(doc["metrics"]["train/loss"]) == 4  # still miles, updated
    assert "update: changed: rollout/reward/raw_mean: steps added: 3" in updated.out
    native = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--out", str(link), "--format", "detaudit")
    assert native.code == 0 and json.loads(real.read_text())["schema"] == "detaudit/standard/1"


def test_record_no_write_compares_and_writes_nothing(toy_card: Path, tmp_path: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    before = standard_of(toy_card).read_bytes()
    agree = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--parallel", "2", "--no-write")
    assert agree.code == 0, agree.text
    assert "AGREE: 4 metric series identical across 2 runs; nothing written (--no-write)" in agree.out
    bug = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--parallel", "2", "--no-write", "--", "--unseeded")
    assert bug.code == 1 and "runs disagree: nothing written" in bug.out and "root divergence" in bug.out
    assert standard_of(toy_card).read_bytes() == before
    assert sorted(p.name for p in standard_of(toy_card).parent.iterdir()) == [standard_of(toy_card).name]
    conflict = run_cli("record", str(toy_card), "--no-write", "--update")
    assert conflict.code == 2 and conflict.err.startswith("detaudit: error: record: --no-write writes nothing")


def test_standards_dir_is_resolved_against_the_project_and_temp_dirs_are_kept_only_on_failure(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "cards").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    card = project / "cards" / "c.toml"
    card.write_text(f'name = "c"\ncommand = {json.dumps(["{python}", str(TOY)])}\ntimeout_s = 60\n'
                    'runner = ["cpu", "test"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", cwd=elsewhere)
    assert result.code == 0, result.text
    assert (project / "standards" / "c.cpu-test.json").exists() and not (elsewhere / "standards").exists()
    removed = [line for line in result.err.splitlines() if "removed the run dir" in line]
    assert removed and not Path(removed[0].split("run dir ")[1].split(" (")[0]).exists()
    verify = run_cli("verify", str(card), cwd=Path("/"))
    assert verify.code == 0 and f"PASSED: 4 metric series match {project / 'standards' / 'c.cpu-test.json'}" in verify.out
    failed = run_cli("verify", str(card), "--", "--unseeded", cwd=elsewhere)
    assert failed.code == 1
    kept = [line for line in failed.err.splitlines() if "run dirs kept for inspection" in line]
    assert kept and (Path(kept[0].split("inspection: ")[1]) / "run1" / "metrics.jsonl").exists()


def test_failed_record_leaves_no_empty_standards_dir(toy_card: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--", "--fail")
    assert result.code == 1 and "no standard written" in result.err
    assert not (toy_card.parent / "standards").exists()


def _start_record(card: Path, workdir: Path, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "detaudit", "record", str(card), "--runs", "2", "--no-doctor", "--workdir",
                             str(workdir), "--", "--sleep", "120", "--spawn-child", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (workdir / "run1" / "child.pid").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.3)  # the child wrote its pid; let the recipe reach its sleep
    return proc


def test_sigterm_kills_every_run_and_removes_the_lock(toy_card: Path, tmp_path: Path) -> None:
    proc = _start_record(toy_card, tmp_path / "runs")
    child = int((tmp_path / "runs" / "run1" / "child.pid").read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "interrupted (SIGTERM): killed the process group of run 1; no standard written" in err
    assert not pid_alive(child)
    assert not Path(str(standard_of(toy_card)) + ".lock").exists() and not (toy_card.parent / "standards").exists()


def test_a_second_ctrl_c_hurries_the_kill_and_still_kills_everything(toy_card: Path, tmp_path: Path) -> None:
    proc = _start_record(toy_card, tmp_path / "runs", "--ignore-term")  # only SIGKILL ends these runs
    child = int((tmp_path / "runs" / "run1" / "child.pid").read_text())
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)  # inside the SIGTERM grace: the runs ignore SIGTERM
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "interrupted (SIGINT, again: SIGKILL at once): killed the process group of run 1" in err
    assert "Traceback" not in err
    assert not pid_alive(child)
    assert not Path(str(standard_of(toy_card)) + ".lock").exists()


def test_a_symlinked_trace_folder_is_refused_before_any_run(toy_card: Path, tmp_path: Path, toy_standard: Path) -> None:
    # `record --update` used to rewrite the standard and then crash removing the old trace (rmtree on a link).
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    path = standard_of(toy_card)
    before = path.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "trace").mkdir(parents=True)
    (elsewhere / "meta.json").write_text(json.dumps({"schema": "detaudit/trace/1", "mode": "rng"}))
    link = path.with_name(path.stem + ".trace")
    link.symlink_to(elsewhere, target_is_directory=True)
    for extra in ((), ("--trace",)):
        result = run_cli("record", str(toy_card), "--runs", "2", "--update", "--no-doctor",
                         "--workdir", str(tmp_path / f"runs{len(extra)}"), *extra)
        assert result.code == 2, result.text
        assert result.err == f"detaudit: error: {link}: is a symbolic link; a standard's trace folder must be a real " \
                             "folder (remove the link, or put the folder it points to in its place)\n"
        assert not (tmp_path / f"runs{len(extra)}").exists()  # refused before any run
    assert path.read_bytes() == before and link.is_symlink() and (elsewhere / "meta.json").is_file()
    assert not Path(str(path) + ".lock").exists()


def untraceable_card(tmp_path: Path) -> Path:
    """A card whose run is not Python (so no trace bootstrap starts in it) and writes fixed metrics."""
    lines = "".join(json.dumps({"step_key": "step", "step": i, "loss": i / 2}) + "\n" for i in range(3))
    source = tmp_path / "metrics.jsonl"
    source.write_text(lines)
    card = tmp_path / "sh.toml"
    card.write_text(f'name = "sh"\ncommand = {json.dumps(["sh", "-c", f"cp {source} $DETAUDIT_METRICS_JSONL"])}\n'
                    f'timeout_s = 60\nrunner = ["cpu", "test"]\nstandards_dir = "{tmp_path / "standards"}"\n'
                    f'python = {json.dumps(sys.executable)}\n')  # no Python in the command: the probe's, named
    return card


def test_a_traced_record_whose_run_left_no_trace_writes_nothing(tmp_path: Path) -> None:
    # The standard used to be written, then copying run 1's trace crashed (what `record --cluster
    # --trace` did before runs carried their trace variables). Now the missing trace is found first.
    card = untraceable_card(tmp_path)
    result = run_cli("record", str(card), "--runs", "2", "--trace", "--no-doctor", "--workdir", str(tmp_path / "runs"))
    assert result.code == 2, result.text
    errors = [line for line in result.err.splitlines() if line.startswith("detaudit: error: ")]
    assert errors == [f"detaudit: error: {tmp_path / 'runs' / 'run1' / 'trace'}: run 1 was traced but left no trace "
                      "here; no standard written"], result.err
    assert "Traceback" not in result.err
    assert not (tmp_path / "standards").exists() or list((tmp_path / "standards").iterdir()) == []


def test_update_that_cannot_review_the_old_standard_leaves_it_as_it_was(toy_card: Path, toy_standard: Path) -> None:
    # An old standard holding 10**400: the review of the update used to crash after the new standard
    # was written. The review comes before the write: either it works and the update is written with
    # it, or the old standard stays, byte for byte.
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    path = standard_of(toy_card)
    doc = json.loads(path.read_text())
    doc["series"]["rollout/reward/raw_num_samples"]["points"][0][1] = 10**400
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    result = run_cli("record", str(toy_card), "--runs", "2", "--update", "--no-doctor")
    if result.code == 0:
        assert "update: changed: rollout/reward/raw_num_samples" in result.out, result.text
        assert path.read_bytes() != before
    else:
        assert path.read_bytes() == before, result.text
        assert "RECORDED" not in result.out
    assert not Path(str(path) + ".lock").exists()


def test_verify_never_claims_a_trace_it_did_not_take(tmp_path: Path) -> None:
    card = untraceable_card(tmp_path)
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor").code == 0
    saved = tmp_path / "standards" / "sh.cpu-test.trace"
    (saved / "trace").mkdir(parents=True)
    (saved / "meta.json").write_text(json.dumps({"schema": "detaudit/trace/1", "card": "sh", "mode": "rng"}))
    result = run_cli("verify", str(card), "--workdir", str(tmp_path / "v"))
    assert "this run was traced" not in result.err, result.text
    assert f"trace incomplete: run 1: no trace at {tmp_path / 'v' / 'run1' / 'trace'}" in result.out, result.text
    doc = json.loads(run_cli("verify", str(card), "--json", "--workdir", str(tmp_path / "w")).out)
    assert doc["standard_trace"] is None and doc["trace"]["missing"]
