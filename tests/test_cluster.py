"""record and verify --cluster against a real local Ray cluster (head node with its job server).

One cluster for the whole module (2 CPUs, own ports, own temp dir); it is stopped after by
ending the processes this module started, never with a broad `ray stop`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.run.cluster_job import decode_result, encode_result
from detaudit.standards.standard import load_standard

RAY = Path(sys.executable).parent / "ray"
ACTIVE = ("PENDING", "RUNNING")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_under(marker: str) -> list[int]:
    """Pids whose command line names ``marker`` (this module's own Ray temp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray head with the dashboard's job server on 127.0.0.1; yields its HTTP address."""
    temp = Path(tempfile.mkdtemp(prefix="rayt", dir="/tmp"))  # short: Ray's socket paths are bounded
    dash = free_port()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO),
               # A token in ~/.ray (another cluster's) would switch token auth on; this test cluster has none.
               RAY_AUTH_MODE="disabled")
    argv = [str(RAY), "start", "--head", "--block", "--port", str(free_port()), "--dashboard-port", str(dash),
            "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "2", "--num-gpus", "0",
            "--temp-dir", str(temp), "--ray-client-server-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()), "--disable-usage-stats"]
    head = subprocess.Popen(argv, env=env, stdout=open(temp / "head.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        from ray.job_submission import JobSubmissionClient

        deadline = time.time() + 180
        while True:
            try:  # up when it takes a job (its agent starts after the HTTP server)
                ready = JobSubmissionClient(address).submit_job(entrypoint="true", entrypoint_num_cpus=0)
                break
            except Exception:
                if head.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the Ray head did not start: {(temp / 'head.log').read_text()[-3000:]}")
                time.sleep(1)
        while str(JobSubmissionClient(address).get_job_status(ready)) not in ("SUCCEEDED", "FAILED"):
            if time.time() > deadline:
                raise RuntimeError("the Ray head's job server does not finish a trivial job")
            time.sleep(1)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)  # --block: ends every Ray process it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        for _ in range(50):
            left = _processes_under(str(temp))
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        shutil.rmtree(temp, ignore_errors=True)


def client(address: str):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def our_jobs(address: str, card_name: str, probes: bool = False) -> dict[str, str]:
    """submission id -> status of every run job (and probe job) detaudit submitted for this card."""
    return {j.submission_id: str(j.status) for j in client(address).list_jobs()
            if (j.metadata or {}).get("detaudit_card") == card_name
            and (probes or not j.submission_id.endswith("-probe"))}


def without_provenance(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["recorded"].pop("date")
    doc.pop("runner")
    return doc


def test_result_block_round_trip_and_bounds() -> None:
    result = {"status": "ok", "metrics_b64": "eyJhIjogMX0K", "log_tail": "x" * 1000}
    block = encode_result(result, "n1")
    log = "Runtime env is setting up.\n" + block + "trailing ray message\n"
    assert decode_result(log, "n1") == result
    assert decode_result(log, "other") is None  # another nonce: not ours
    with pytest.raises(ValueError, match="no end"):
        decode_result(log[: log.index("DETAUDIT-RESULT-END")], "n1")
    lines = block.splitlines()
    lines[1] = ("A" if lines[1][0] != "A" else "B") + lines[1][1:]
    with pytest.raises(ValueError, match="corrupt"):
        decode_result("\n".join(lines) + "\n", "n1")
    with pytest.raises(ValueError, match="bound"):
        encode_result({"blob": os.urandom(4000).hex()}, "n1", max_bytes=1000)
    with pytest.raises(ValueError, match="bound"):
        decode_result(encode_result({"blob": os.urandom(4000).hex()}, "n1"), "n1", max_bytes=1000)


def test_unreachable_cluster_and_bad_cpus_are_input_errors(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    result = run_cli("record", str(card), "--runs", "2", "--cluster", f"http://127.0.0.1:{free_port()}")
    assert result.code == 2 and "cannot reach a Ray job server" in result.err, result.text
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    bad = write_card(tmp_path / "bad.toml", extra="cpus_per_run = 0\n")
    result = run_cli("verify", str(bad), "--cluster", "http://127.0.0.1:9")
    assert result.code == 2 and f"{bad}:6: cpus_per_run: must be a positive number" in result.err, result.text
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"a": 1}\n')
    result = run_cli("verify", str(card), "--metrics", str(metrics), "--cluster", "http://127.0.0.1:9")
    assert result.code == 2 and "--cluster runs the card; with --metrics nothing runs" in result.err, result.text


def test_toy_record_on_cluster_equals_local_record(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toycl")
    std = tmp_path / "standards" / "toycl.cpu-test.json"
    local = run_cli("record", str(card), "--runs", "2", "--workdir", str(tmp_path / "local"))
    assert local.code == 0, local.text
    local_bytes = std.read_bytes()
    std.rename(tmp_path / "local.json")
    remote = run_cli("record", str(card), "--runs", "2", "--parallel", "2", "--cluster", cluster,
                     "--workdir", str(tmp_path / "remote"))
    assert remote.code == 0, remote.text
    assert remote.out == local.out  # the same report, byte for byte
    assert "Ray job detaudit-toycl-" in remote.err and "runner class cpu-test" in remote.err
    remote_bytes = std.read_bytes()
    local_doc, remote_doc = json.loads(local_bytes), json.loads(remote_bytes)
    assert json.dumps(remote_doc["series"]) == json.dumps(local_doc["series"])
    # Only the provenance (where the runs ran: the job's environment on its node) may differ.
    assert remote_doc["runner"]["class"] == local_doc["runner"]["class"]
    assert without_provenance(remote_doc) == without_provenance(local_doc)
    # The runs' metrics came back through the job log into the local run dirs.
    for i in (1, 2):
        assert (tmp_path / "remote" / f"run{i}" / "metrics.jsonl").stat().st_size > 0
        assert "toy recipe: wrote" in (tmp_path / "remote" / f"run{i}" / "run.log").read_text()
    assert set(our_jobs(cluster, "toycl", probes=True).values()) == {"SUCCEEDED"}
    assert len(our_jobs(cluster, "toycl")) == 2
    verified = run_cli("verify", str(card), "--cluster", cluster, "--workdir", str(tmp_path / "verify"))
    assert verified.code == 0, verified.text
    assert "PASSED: 4 metric series match" in verified.out


def test_failed_run_stops_the_other_job(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toyfail")
    result = run_cli("record", str(card), "--runs", "2", "--parallel", "2", "--cluster", cluster,
                     "--workdir", str(tmp_path / "runs"), "--", "--fail-index", "0", "--sleep", "120")
    assert result.code == 1, result.text
    assert "run 1 exit code 3" in result.err
    assert "toy recipe: failing on purpose" in result.err  # the log tail came back from the node
    assert "stopped Ray jobs detaudit-toyfail-" in result.err and "-run2" in result.err
    jobs = our_jobs(cluster, "toyfail")
    assert len(jobs) == 2 and not set(jobs.values()) & set(ACTIVE), jobs
    assert not (tmp_path / "standards").exists()


def test_timeout_stops_the_job(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toyslow")
    card.write_text(card.read_text().replace("timeout_s = 60", "timeout_s = 3"))
    result = run_cli("record", str(card), "--runs", "2", "--cluster", cluster, "--workdir", str(tmp_path / "runs"),
                     "--", "--sleep", "120")
    assert result.code == 1, result.text
    assert "run 1 timed out after 3s" in result.err
    jobs = our_jobs(cluster, "toyslow")
    assert len(jobs) == 1 and not set(jobs.values()) & set(ACTIVE), jobs  # run 2 was never submitted


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_every_job_it_submitted(cluster: str, tmp_path: Path, sig: signal.Signals) -> None:
    name = f"toyint{int(sig)}"
    card = write_card(tmp_path / "toy.toml", name=name)
    bystander = client(cluster).submit_job(entrypoint="sleep 300", entrypoint_num_cpus=0,
                                           metadata={"detaudit_card": "bystander"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "detaudit", "record", str(card), "--runs", "2", "--parallel", "2", "--cluster", cluster,
         "--workdir", str(tmp_path / "runs"), "--", "--sleep", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and list(our_jobs(cluster, name).values()).count("RUNNING") < 2:
            time.sleep(0.5)
        assert list(our_jobs(cluster, name).values()) == ["RUNNING", "RUNNING"]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    jobs = our_jobs(cluster, name)
    assert "stopped Ray jobs" in err and all(job in err for job in jobs), err
    assert set(jobs.values()) == {"STOPPED"}, jobs
    # What `ray job list` says of each of them (its output: a pretty-printed list of JobDetails).
    listed = subprocess.run([str(RAY), "job", "list", "--address", cluster], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, RAY_AUTH_MODE="disabled"))
    entries = (listed.stdout + listed.stderr).split("JobDetails(")
    for job in jobs:
        mine = [e for e in entries if f"'{job}'" in e]
        assert len(mine) == 1 and "JobStatus.STOPPED" in mine[0], (job, listed.stdout[-3000:])
    # Nothing else was touched: a job that is not this record's still runs.
    assert str(client(cluster).get_job_status(bystander)) == "RUNNING"
    client(cluster).stop_job(bystander)
    assert not (tmp_path / "standards").exists()


def test_runs_on_different_runner_classes_write_no_standard(cluster: str, tmp_path: Path) -> None:
    # Run 2's interpreter dispatches torch to its portable kernels: a different runner class,
    # exactly what a node with another CPU would report.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('DETAUDIT_RUN_INDEX') == '1':\n    os.environ['ATEN_CPU_CAPABILITY'] = 'default'\n"
    )
    card = write_card(tmp_path / "toy.toml", name="toymix", extra='pythonpath = ["site"]\n')
    card.write_text(card.read_text().replace('runner = ["cpu", "test"]', 'runner = "auto"'))
    result = run_cli("record", str(card), "--runs", "2", "--parallel", "2", "--cluster", cluster,
                     "--workdir", str(tmp_path / "runs"))
    assert result.code == 1, result.text
    assert "runs ran on different runner classes" in result.err
    lines = [line for line in result.err.splitlines() if "Ray job detaudit-toymix-" in line]
    assert len(lines) == 2 and lines[0].split("runner class ")[1] != lines[1].split("runner class ")[1], result.err
    assert lines[1].endswith("-default")
    assert not (tmp_path / "standards").exists()


def test_tiny_recipe_on_cluster_matches_a_local_run(cluster: str, tmp_path: Path) -> None:
    std = tmp_path / "tiny.json"
    card = REPO / "recipes" / "sd3_pickscore_nft.toml"
    result = run_cli("record", str(card), "--runs", "2", "--cluster", cluster, "--out", str(std),
                     "--workdir", str(tmp_path / "runs"), timeout=900)
    assert result.code == 0, result.text
    standard = load_standard(std)
    assert len(standard.series) == 20
    # One local run, outside Ray's jobs, gives the same bits.
    local = run_cli("verify", str(card), "--standard", str(std), "--workdir", str(tmp_path / "local"), timeout=900)
    assert local.code == 0, local.text
    assert "PASSED: 20 metric series match" in local.out
