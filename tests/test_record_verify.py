"""record and verify end to end, through the installed CLI and a small recipe script."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import given_toy_standard, pid_alive, run_cli, standard_of, write_card, write_jsonl

from detaudit.run.local import gpu_slots
from detaudit.standards.standard import load_standard


@pytest.mark.slow
def test_seeded_record_writes_standard_and_verify_passes(toy_card: Path, tmp_path: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "3", "--workdir", str(tmp_path / "runs"))
    assert result.code == 0, result.text
    path = standard_of(toy_card)
    assert f"RECORDED: 4 metric series identical across 3 runs -> {path}" in result.out
    doc = json.loads(path.read_text())
    assert doc["schema"] == "detaudit/standard/1" and doc["name"] == "toy"
    assert doc["runner"]["class"] == ["cpu", "test"] and doc["runner"]["python"]
    assert doc["recorded"]["runs"] == doc["recorded"]["agreeing"] == 3
    assert doc["series"]["train/grad_norm"]["points"][0] == [0.0, {"float": "NaN"}]
    assert set(doc["excluded"]["series"]) == {"perf/rollout_time", "perf/step_time"}
    for i in (1, 2, 3):
        assert (tmp_path / "runs" / f"run{i}" / "run.log").exists()
    verify = run_cli("verify", str(toy_card))
    assert verify.code == 0 and f"[detaudit] PASSED: 4 metric series match {path}" in verify.out
    # The same runs always give the same series bytes.
    again = tmp_path / "again.json"
    assert run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--out", str(again)).code == 0
    assert json.loads(again.read_text())["series"] == doc["series"]


@pytest.mark.slow
def test_unseeded_record_refuses_and_names_the_divergence(toy_card: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--", "--unseeded")
    assert result.code == 1
    assert "runs disagree: no standard written" in result.out
    assert "1 / 4 identical, 3 mismatched" in result.out
    assert "root divergence (line 1 of run 1)" in result.out and "rollout/reward/raw_mean @ rollout/step 0" in result.out
    assert not standard_of(toy_card).exists()


@pytest.mark.slow
def test_verify_reports_each_failing_series(toy_card: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    result = run_cli("verify", str(toy_card), "--", "--unseeded")
    assert result.code == 1
    assert "FAILED: 3 of 4 metric series differ" in result.out
    assert "rollout/reward/raw_mean: step 0: standard " in result.out and "(value" in result.out


@pytest.mark.slow
def test_existing_standard_needs_update_and_update_prints_changes(toy_card: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    before = standard_of(toy_card).read_text()
    again = run_cli("record", str(toy_card), "--runs", "2")
    assert again.code == 2 and "exists; pass --update to replace it" in again.err
    assert len(again.err.strip().splitlines()) == 1 and standard_of(toy_card).read_text() == before
    updated = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--", "--steps", "4")
    assert updated.code == 0, updated.text
    assert "update: changed: rollout/reward/raw_mean: steps added: 3" in updated.out
    unchanged = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--update", "--", "--steps", "4")
    assert "update: series: 0 changed, 0 added, 0 removed, 4 identical" in unchanged.out


@pytest.mark.slow
def test_allow_partial_records_agreeing_series_only(toy_card: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--allow-partial", "--", "--unseeded")
    assert result.code == 0, result.text
    doc = json.loads(standard_of(toy_card).read_text())
    assert list(doc["series"]) == ["rollout/reward/raw_num_samples"]
    assert doc["dropped"]["train/loss"]["kind"] == "value"
    assert "dropped 3 disagreeing series" in result.out


@pytest.mark.slow
def test_miles_format_record_and_verify(toy_card: Path, tmp_path: Path) -> None:
    out = tmp_path / "e2e_standard.json"
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--format", "miles", "--out", str(out),
                     "--workdir", str(tmp_path / "runs"))
    assert result.code == 0, result.text
    doc = json.loads(out.read_text())
    assert set(doc) == {"meta", "metrics"} and doc["metrics"]["train/grad_norm"][0][0] == 0.0
    metrics = tmp_path / "runs" / "run1" / "metrics.jsonl"
    ok = run_cli("verify", "--metrics", str(metrics), "--standard", str(out))
    assert ok.code == 0 and "PASSED: 4 metric series" in ok.out
    # A run that lacks a listed series fails on it.
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    for line in lines:
        line.pop("train/loss", None)
    short = write_jsonl(tmp_path / "short.jsonl", [json.dumps(line) for line in lines])
    bad = run_cli("verify", "--metrics", str(short), "--standard", str(out))
    assert bad.code == 1 and "train/loss: missing in the run" in bad.out


@pytest.mark.slow
def test_verify_on_another_runner_class_is_not_verified(toy_card: Path, tmp_path: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    other = write_card(tmp_path / "other.toml")
    other.write_text(other.read_text().replace('runner = ["cpu", "test"]', 'runner = ["h200", "1gpu"]'))
    result = run_cli("verify", str(other), "--standard", str(standard_of(toy_card)))
    assert result.code == 1, result.text
    assert "NOT VERIFIED: no standard for runner class h200-1gpu (standards exist for cpu-test" in result.out
    strict = run_cli("verify", str(other), "--standard", str(standard_of(toy_card)), "--strict-runner")
    assert strict.code == 1 and "NOT VERIFIED" in strict.out  # the old flag stays accepted: now the default
    allowed = run_cli("verify", str(other), "--standard", str(standard_of(toy_card)), "--allow-other-runner")
    assert allowed.code == 0 and "SKIPPED: no standard for runner class h200-1gpu" in allowed.out
    both = run_cli("verify", str(other), "--strict-runner", "--allow-other-runner")
    assert both.code == 2 and both.err.startswith("detaudit: error: ") and len(both.err.splitlines()) == 1


@pytest.mark.slow
def test_verify_finds_the_standard_of_another_class_by_exact_name(toy_card: Path, tmp_path: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    other = write_card(tmp_path / "other.toml")
    other.write_text(other.read_text().replace('runner = ["cpu", "test"]', 'runner = ["h200", "1gpu"]'))
    result = run_cli("verify", str(other))
    assert result.code == 1 and "NOT VERIFIED: no standard for runner class h200-1gpu (standards exist for cpu-test" in result.out
    allowed = run_cli("verify", str(other), "--allow-other-runner")
    assert allowed.code == 0 and "SKIPPED" in allowed.out
    # Card "to" must not take card "toy"'s standard, nor card "toy"'s "toy.v2" (glob "toy.*.json").
    v2 = write_card(tmp_path / "v2.toml", name="toy.v2")
    v2.write_text(v2.read_text().replace('runner = ["cpu", "test"]', 'runner = ["h200", "1gpu"]'))
    (tmp_path / "standards" / "toy.v2.h200-1gpu.json").write_text(
        standard_of(toy_card).read_text().replace('"name": "toy"', '"name": "toy.v2"')
        .replace('["cpu", "test"]', '["h200", "1gpu"]'))
    standard_of(toy_card).unlink()
    lonely = run_cli("verify", str(toy_card), "--allow-other-runner")
    assert lonely.code == 2 and "no standard for card 'toy'" in lonely.err, lonely.text
    missing = run_cli("verify", str(write_card(tmp_path / "lonely.toml", name="lonely")))
    assert missing.code == 2 and "no standard for card 'lonely'" in missing.err


@pytest.mark.slow
def test_verify_failure_names_environment_differences(toy_card: Path, toy_standard: Path) -> None:
    given_toy_standard(toy_card, toy_standard)  # as `record CARD --runs 2` leaves it
    path = standard_of(toy_card)
    doc = json.loads(path.read_text())
    doc["runner"]["python"] = "2.7.18"
    path.write_text(json.dumps(doc))
    result = run_cli("verify", str(toy_card), "--", "--unseeded")
    assert result.code == 1 and "this environment differs from the standard's" in result.out
    assert "python: standard '2.7.18'" in result.out


@pytest.mark.slow
def test_failed_run_ends_record_with_log_tail(toy_card: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--", "--fail")
    assert result.code == 1
    assert "run 1 exit code 3" in result.err and "failing on purpose" in result.err
    assert "no standard written" in result.err and not standard_of(toy_card).exists()


@pytest.mark.slow
def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    card = write_card(tmp_path / "slow.toml", extra="")
    card.write_text(card.read_text().replace("timeout_s = 60", "timeout_s = 2"))
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "runs"),
                     "--", "--sleep", "60", "--spawn-child")
    assert result.code == 1 and "timed out after 2s" in result.err
    child = int((tmp_path / "runs" / "run1" / "child.pid").read_text())
    assert not pid_alive(child)
    assert not (tmp_path / "runs" / "run2" / "run.log").exists()  # the record ended at the first failure


@pytest.mark.slow
def test_successful_run_leaves_no_process_behind(toy_card: Path, tmp_path: Path) -> None:
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "runs"), "--", "--spawn-child")
    assert result.code == 0, result.text
    for i in (1, 2):
        assert not pid_alive(int((tmp_path / "runs" / f"run{i}" / "child.pid").read_text()))


@pytest.mark.slow
def test_ctrl_c_kills_runs_and_writes_nothing(toy_card: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "detaudit", "record", str(toy_card), "--runs", "2", "--no-doctor", "--parallel", "2",
         "--workdir", str(runs), "--", "--sleep", "60", "--spawn-child"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 60
    pid_files = [runs / "run1" / "child.pid", runs / "run2" / "child.pid"]
    while time.time() < deadline and not all(p.exists() and p.read_text() for p in pid_files):
        time.sleep(0.1)
    children = [int(p.read_text()) for p in pid_files]
    assert all(pid_alive(c) for c in children)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "interrupted" in err and "no standard written" in err
    assert not any(pid_alive(c) for c in children)
    assert not standard_of(toy_card).exists() and not Path(str(standard_of(toy_card)) + ".lock").exists()


@pytest.mark.slow
def test_parallel_runs_overlap_on_disjoint_gpu_sets(tmp_path: Path) -> None:
    card = write_card(tmp_path / "gpu.toml", extra="gpus_per_run = 1\n")
    runs = tmp_path / "runs"
    result = run_cli("record", str(card), "--runs", "3", "--no-doctor", "--parallel", "2", "--workdir", str(runs),
                     # 5 s, not 1.5: on a loaded 2-core CI machine a run's interpreter start alone can
                     # take over a second, and the overlap below must not depend on it
                     "--", "--sleep", "5", env={"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert result.code == 0, result.text
    info = [json.loads((runs / f"run{i}" / "info.json").read_text()) for i in (1, 2, 3)]
    assert {i["cuda"] for i in info} <= {"4", "5"}
    overlapping = [(a, b) for a in range(3) for b in range(a + 1, 3)
                   if info[a]["start"] < info[b]["end"] and info[b]["start"] < info[a]["end"]]
    assert overlapping, "two runs should have run at once"
    for a, b in overlapping:
        assert info[a]["cuda"] != info[b]["cuda"]


def test_gpu_slots() -> None:
    assert gpu_slots(0, 4, ["0", "1"]) is None
    assert gpu_slots(2, 4, ["0", "1", "2", "3", "4"]) == [["0", "1"], ["2", "3"]]
    assert gpu_slots(1, 2, ["0", "1", "2"]) == [["0"], ["1"]]


@pytest.mark.slow
def test_concurrent_record_of_one_standard_fails_clearly(toy_card: Path) -> None:
    # The first record holds the lock for at least 20 s (two runs at once), long past the second's start-up.
    first = subprocess.Popen([sys.executable, "-m", "detaudit", "record", str(toy_card), "--runs", "2", "--no-doctor", "--parallel",
                              "2", "--", "--sleep", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = Path(str(standard_of(toy_card)) + ".lock")
    deadline = time.time() + 30
    while not lock.exists() and time.time() < deadline:
        time.sleep(0.05)
    second = run_cli("record", str(toy_card), "--runs", "2", "--no-doctor")
    first.communicate(timeout=120)
    assert second.code == 2 and "another 'detaudit record' of this standard is running" in second.err
    assert first.returncode == 0 and load_standard(standard_of(toy_card)).name == "toy"


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "detaudit"
    assert script.exists()
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "detaudit" in result.stdout


@pytest.mark.slow
def test_library_usable_from_python(toy_card: Path, tmp_path: Path) -> None:
    from detaudit.flows.record import record
    from detaudit.flows.verify import verify

    result = record(toy_card, runs=2, out=tmp_path / "s.json")
    assert result.ok and result.standard is not None and len(result.standard.series) == 4
    checked = verify(toy_card, standard=tmp_path / "s.json")
    assert checked.status == "passed" and checked.compared == 4


ADDRESS_RECIPE = """
import json, os
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as out:
    out.write(json.dumps({"step_key": "step", "step": 0, "saw_ray_address": int("RAY_ADDRESS" in os.environ)}) + "\\n")
"""


@pytest.mark.slow
def test_a_local_run_gets_no_ray_address_unless_its_card_names_one(tmp_path: Path) -> None:
    """RAY_ADDRESS on this machine (a `ray start` cluster, someone else's) is not where a local run's
    Ray goes: the run does not see it. A card that names a cluster in its env keeps it."""
    script = tmp_path / "address.py"
    script.write_text(ADDRESS_RECIPE)

    def saw(name: str, extra: str = "") -> float:
        card = tmp_path / f"{name}.toml"
        card.write_text(f'name = "{name}"\ncommand = {json.dumps(["{python}", str(script)])}\ntimeout_s = 60\n'
                        f'runner = ["cpu", "test"]\n{extra}')
        result = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor",
                         "--workdir", str(tmp_path / name), env={"RAY_ADDRESS": "127.0.0.1:1"})
        assert result.code == 0, result.text
        return json.loads((tmp_path / name / "run1" / "metrics.jsonl").read_text())["saw_ray_address"]

    assert saw("plain") == 0
    assert saw("named", '[env]\nRAY_ADDRESS = "auto"\n') == 1


@pytest.mark.slow
def test_a_relative_workdir_is_the_same_folder_for_detaudit_and_the_run(toy_card: Path, tmp_path: Path) -> None:
    # Each run's cwd is its own run dir: a relative --workdir used to send its metrics path there, twice nested.
    result = run_cli("record", str(toy_card), "--runs", "2", "--no-write", "--no-doctor", "--workdir", "rel",
                     cwd=tmp_path)
    assert result.code == 0, result.text
    assert (tmp_path / "rel" / "run1" / "metrics.jsonl").is_file() and not (tmp_path / "rel" / "run1" / "rel").exists()
