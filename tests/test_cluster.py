"""record and verify --cluster against a real local Ray cluster (head node with its job server).

One cluster for the whole module (2 CPUs, own ports, own temp dir, started by conftest.ray_head);
it is stopped after by ending the processes this module started, never with a broad `ray stop`.
A server that never answers and one that answers HTTP 500 are local sockets (loopback only): no
Ray server can be made to do either on purpose.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from conftest import RAY, REPO, RayHead, Recording, free_port, ray_head, run_cli, trace_card, write_card

from detaudit.run.cluster_job import decode_result, encode_result, expand, portable
from detaudit.standards.standard import load_standard

ACTIVE = ("PENDING", "RUNNING")
pytestmark = pytest.mark.xdist_group("test_cluster")  # one worker: one Ray head for the module


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    with ray_head() as started:
        yield started


@pytest.fixture(scope="module")
def cluster(head: RayHead) -> str:
    """The head's job server address."""
    return head.dashboard


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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.ray
def test_toy_record_on_cluster_equals_local_record(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toycl")
    std = tmp_path / "standards" / "toycl.cpu-test.json"
    local = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "local"))
    assert local.code == 0, local.text
    local_bytes = std.read_bytes()
    std.rename(tmp_path / "local.json")
    remote = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--parallel", "2", "--cluster", cluster,
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
    # An explicit --cluster is used as given: a RAY_ADDRESS here (Ray's client would follow it) does not redirect it.
    verified = run_cli("verify", str(card), "--cluster", cluster, "--workdir", str(tmp_path / "verify"),
                       env={"RAY_ADDRESS": f"http://127.0.0.1:{free_port()}"})
    assert verified.code == 0, verified.text
    assert "PASSED: 4 metric series match" in verified.out


@pytest.mark.slow
@pytest.mark.ray
def test_failed_run_stops_the_other_job(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toyfail")
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--parallel", "2", "--cluster", cluster,
                     "--workdir", str(tmp_path / "runs"), "--", "--fail-index", "0", "--sleep", "120")
    assert result.code == 1, result.text
    assert "run 1 exit code 3" in result.err
    assert "toy recipe: failing on purpose" in result.err  # the log tail came back from the node
    assert "stopped Ray jobs detaudit-toyfail-" in result.err and "-run2" in result.err
    jobs = our_jobs(cluster, "toyfail")
    assert len(jobs) == 2 and not set(jobs.values()) & set(ACTIVE), jobs
    assert not (tmp_path / "standards").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_timeout_stops_the_job(cluster: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toyslow")
    card.write_text(card.read_text().replace("timeout_s = 60", "timeout_s = 3"))
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--cluster", cluster, "--workdir", str(tmp_path / "runs"),
                     "--", "--sleep", "120")
    assert result.code == 1, result.text
    assert "run 1 timed out after 3s" in result.err
    jobs = our_jobs(cluster, "toyslow")
    assert len(jobs) == 1 and not set(jobs.values()) & set(ACTIVE), jobs  # run 2 was never submitted


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_every_job_it_submitted(cluster: str, tmp_path: Path, sig: signal.Signals) -> None:
    name = f"toyint{int(sig)}"
    card = write_card(tmp_path / "toy.toml", name=name)
    bystander = client(cluster).submit_job(entrypoint="sleep 300", entrypoint_num_cpus=0,
                                           metadata={"detaudit_card": "bystander"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "detaudit", "record", str(card), "--runs", "2", "--no-doctor", "--parallel", "2", "--cluster", cluster,
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


@pytest.mark.slow
@pytest.mark.ray
def test_runs_on_different_runner_classes_write_no_standard(cluster: str, tmp_path: Path) -> None:
    # Run 2's interpreter dispatches torch to its portable kernels: a different runner class,
    # exactly what a node with another CPU would report. Both classes come from the probe on this
    # machine (an AMX Xeon's native class ends in -default-amx, an AVX2 one's in -avx2): no CPU assumed.
    from detaudit.env.provenance import detect_environment, runner_class

    native = str(runner_class(detect_environment(env=dict(os.environ)), 0))
    forced = str(runner_class(detect_environment(env=dict(os.environ, ATEN_CPU_CAPABILITY="default")), 0))
    if native == forced:
        pytest.skip(f"torch already runs its portable kernels here ({native}): no second class to force")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('DETAUDIT_RUN_INDEX') == '1':\n    os.environ['ATEN_CPU_CAPABILITY'] = 'default'\n"
    )
    card = write_card(tmp_path / "toy.toml", name="toymix", extra='pythonpath = ["site"]\n')
    card.write_text(card.read_text().replace('runner = ["cpu", "test"]', 'runner = "auto"'))
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--parallel", "2", "--cluster", cluster,
                     "--workdir", str(tmp_path / "runs"))
    assert result.code == 1, result.text
    assert "runs ran on different runner classes" in result.err
    lines = sorted(line for line in result.err.splitlines() if "Ray job detaudit-toymix-" in line)
    assert [line.split("runner class ")[1] for line in lines] == [native, forced], result.err
    assert not (tmp_path / "standards").exists()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.recipe
def test_tiny_recipe_on_cluster_matches_a_local_run(cluster: str, tmp_path: Path,
                                                    nft_traced_recording: Recording) -> None:
    card = REPO / "recipes" / "sd3_pickscore_nft.toml"
    # The local runs, outside Ray's jobs: the session's recording of this card (`record --runs 3 --trace`,
    # three agreeing runs; the tracer moves no bit: tests/test_pipeline.py). A run as a Ray job on the
    # cluster must give their bits. (That a cluster `record` writes a standard: the toy card's test above.)
    assert nft_traced_recording.result.code == 0, nft_traced_recording.result.text
    assert len(load_standard(nft_traced_recording.standard).series) == 20
    on_cluster = run_cli("verify", str(card), "--cluster", cluster, "--standard", str(nft_traced_recording.standard),
                         "--workdir", str(tmp_path / "runs"), timeout=900)
    assert on_cluster.code == 0, on_cluster.text
    assert "PASSED: 20 metric series match" in on_cluster.out
    (job_log,) = (tmp_path / "runs").rglob("run.log")
    assert "Ray: joined the cluster" in job_log.read_text()


def test_portable_text_names_this_machines_paths_and_only_whole_ones() -> None:
    here = {"workdir": "/tmp/w/run1", "metrics": "/tmp/w/run1/metrics.jsonl", "python": "/v/bin/python",
            "project": "/proj", "detaudit": "/src/detaudit", "detaudit_parent": "/src"}
    node = {"workdir": "/n/run1", "metrics": "/n/run1/m.jsonl", "python": "/py", "project": "/cwd",
            "detaudit": "/pkgs/detaudit", "detaudit_parent": "/pkgs"}
    cases = {
        "/tmp/w/run1/metrics.jsonl": "/n/run1/m.jsonl",
        "/tmp/w/run1/trace": "/n/run1/trace",
        "--out=/tmp/w/run1 /v/bin/python": "--out=/n/run1 /py",
        "/src/detaudit/trace/site:/src:/proj/x:/project2": "/pkgs/detaudit/trace/site:/pkgs:/cwd/x:/project2",
        "/src/tests/recipe.py": "/src/tests/recipe.py",  # under the package's folder, not the package: as is
        "/v/bin/python3": "/v/bin/python3",
        '{"a": "{workdir}"}': '{"a": "{workdir}"}',  # braces are text, never placeholders
    }
    for text, there in cases.items():
        assert expand(portable(text, here), here) == text
        assert expand(portable(text, here), node) == there, text
    with pytest.raises(ValueError, match="unknown path anchor"):
        expand([["", "home"]], node)


def test_files_a_job_sends_back_stay_in_the_folders_asked_for(tmp_path: Path) -> None:
    from detaudit.run.cluster import _received_files
    from detaudit.run.spec import RunSpec

    run = tmp_path / "run1"
    spec = RunSpec(index=0, argv=[], env={}, workdir=run, log_path=run / "run.log",
                   metrics_path=run / "metrics.jsonl", timeout_s=1, collect=("trace",))
    data = base64.b64encode(b"{}\n").decode()
    assert _received_files(spec, {"trace/main.1.jsonl": data}) == {run / "trace" / "main.1.jsonl": b"{}\n"}
    for name in ("trace/../../x", "../x", "/etc/x", "trace/", "trace/.hidden", "other/main.1.jsonl", "trace/a/b"):
        with pytest.raises(ValueError):
            _received_files(spec, {name: data})
    with pytest.raises(ValueError):
        _received_files(spec, {"trace/main.1.jsonl": "not base64!"})


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback socket that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()


@pytest.mark.slow
def test_a_server_that_never_answers_ends_the_command_with_one_line(silent_server: str, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    card.write_text(card.read_text().replace("timeout_s = 60", "timeout_s = 3"))
    started = time.monotonic()
    result = run_cli("record", str(card), "--runs", "2", "--cluster", silent_server, "--no-doctor", timeout=300)
    took = time.monotonic() - started
    assert result.code == 2, result.text
    assert result.err.startswith(f"detaudit: error: {silent_server}: cannot reach a Ray job server: no answer within 5s")
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert took < 120, took  # bounded by the request timeout, not forever
    assert not (tmp_path / "standards").exists()


class _FailingJobServer(http.server.BaseHTTPRequestHandler):
    """Answers like Ray's job server up to the job's status, then HTTP 500 (a broken head); with the
    server's ``stall`` set, it never answers a job request at all (a hung head)."""

    def _send(self, code: int, body: object) -> None:
        data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
        if self.path == "/api/authentication_mode":
            self._send(200, {"authentication_mode": "disabled"})
        elif self.path == "/api/version":
            self._send(200, {"version": "4", "ray_version": "2.60.0", "ray_commit": "test"})
        elif self.path.startswith("/api/packages/"):
            self._send(404, "not found")
        elif self.server.stall.is_set():  # type: ignore[attr-defined]
            self.server.released.wait(600)  # type: ignore[attr-defined]
        else:
            self._send(500, "Internal Server Error: the head broke\nTraceback (most recent call last): ...")

    def do_PUT(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, {})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.server.stall.is_set():  # type: ignore[attr-defined]
            self.server.released.wait(600)  # type: ignore[attr-defined]
        elif self.path == "/api/jobs/":
            self._send(200, {"job_id": body.get("submission_id"), "submission_id": body.get("submission_id")})
        else:
            self._send(500, "Internal Server Error")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingJobServer)
    server.stall, server.released = threading.Event(), threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.slow
def test_a_server_that_stops_answering_ends_the_command_with_one_line(failing_server, tmp_path: Path) -> None:
    # It answers the connection and the version, then never answers the job submission.
    failing_server.stall.set()
    address = f"http://127.0.0.1:{failing_server.server_address[1]}"
    card = write_card(tmp_path / "toy.toml", name="toystall")
    card.write_text(card.read_text().replace("timeout_s = 60", "timeout_s = 3"))
    started = time.monotonic()
    result = run_cli("record", str(card), "--runs", "2", "--cluster", address, "--no-doctor", timeout=300)
    took = time.monotonic() - started
    assert result.code == 2, result.text
    assert result.err.startswith(f"detaudit: error: {address}: the Ray job server failed to accept job "
                                 "detaudit-toystall-"), result.err
    assert "no answer within 5s" in result.err and result.err.count("\n") == 1
    assert took < 120, took


def test_http_500_from_the_job_api_is_one_line_exit_2(failing_server, tmp_path: Path) -> None:
    address = f"http://127.0.0.1:{failing_server.server_address[1]}"
    card = write_card(tmp_path / "toy.toml", name="toy500")
    result = run_cli("record", str(card), "--runs", "2", "--cluster", address, "--no-doctor", timeout=300)
    assert result.code == 2, result.text
    assert result.err.startswith(f"detaudit: error: {address}: the Ray job server failed to report job detaudit-toy500-")
    assert "Request failed with status code 500: Internal Server Error: the head broke" in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert not (tmp_path / "standards").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_record_cluster_trace_end_to_end(cluster: str, tmp_path: Path) -> None:
    """record --cluster --trace: the trace variables reach the node, the node's trace comes back and
    is saved next to the standard; verify --cluster traces its run too and names what differs."""
    card = trace_card(tmp_path, name="tracecl", file="trace")
    runs = tmp_path / "runs"
    result = run_cli("record", str(card), "--runs", "2", "--cluster", cluster, "--trace=modules",
                     "--workdir", str(runs), "--no-doctor", timeout=900)
    assert result.code == 0, result.text
    std = tmp_path / "standards" / "tracecl.cpu-test.json"
    saved = tmp_path / "standards" / "tracecl.cpu-test.trace"
    assert std.exists() and json.loads((saved / "meta.json").read_text())["mode"] == "modules"
    for run in (runs / "run1", runs / "run2"):  # each run's trace, written on the node, came back
        assert list((run / "trace").glob("main.*.jsonl")), sorted(p.name for p in run.iterdir())
    assert list((saved / "trace").glob("main.*.jsonl"))
    same = run_cli("verify", str(card), "--cluster", cluster, "--workdir", str(tmp_path / "v1"), timeout=900)
    assert same.code == 0, same.text
    assert "the standard carries a trace" in same.err and "this run was traced and compared with it" in same.err
    assert "traces identical" in same.out, same.out
    # The card's env reaches the run on the node: this one perturbs the model's Scale module.
    perturbed = trace_card(tmp_path, name="tracecl", file="perturbed", env={"TRACE_RECIPE_PERTURB": "1"})
    other = run_cli("verify", str(perturbed), "--cluster", cluster, "--workdir", str(tmp_path / "v2"), timeout=900)
    assert other.code == 1 and "FAILED" in other.out, other.text
    assert "first differing module: main process: module Sequential.3 (Scale)" in other.out, other.out
    assert list((tmp_path / "v2" / "run1" / "trace").glob("main.*.jsonl"))


# In a Ray job's driver (`python -m detaudit.run.cluster_job SPEC`) only: act once its results are
# out. Reaches the driver through the card's env (PYTHONPATH), as a node's own site set-up would.
NODE_HOOK = r'''
import atexit, base64, json, os, sys


def _after_results():
    if len(sys.argv) < 2 or not sys.argv[0].replace(os.sep, "/").endswith("detaudit/run/cluster_job.py"):
        return
    spec = json.loads(base64.urlsafe_b64decode(sys.argv[1].encode()))
    action = os.environ.get("NODE_HOOK", "")
    if action == "crash-runs" and not spec.get("probe"):
        sys.stdout.flush()
        os._exit(3)  # a crash at exit, after the result block went out
    if action.startswith("forge-probe:") and spec.get("probe"):
        from detaudit.run.cluster_job import encode_result

        forged = {"status": "ok", "returncode": 0, "runner_class": json.loads(action.split(":", 1)[1]),
                  "environment": {}, "node": "forged", "log_tail": "", "metrics_b64": None}
        sys.stdout.write(encode_result(forged, spec["nonce"]))
        sys.stdout.flush()


atexit.register(_after_results)
'''


def hooked_card(tmp_path: Path, name: str, action: str) -> Path:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(NODE_HOOK)
    return write_card(tmp_path / f"{name}.toml", name=name,
                      extra=f"[env]\nPYTHONPATH = {json.dumps(str(hook))}\nNODE_HOOK = {json.dumps(action)}\n")


@pytest.mark.slow
@pytest.mark.ray
def test_a_job_that_fails_after_printing_its_results_is_not_a_good_run(cluster: str, tmp_path: Path) -> None:
    card = hooked_card(tmp_path, "toycrash", "crash-runs")
    result = run_cli("record", str(card), "--runs", "2", "--cluster", cluster, "--workdir", str(tmp_path / "runs"),
                     "--no-doctor")
    assert result.code == 1, result.text
    assert "Ray reports the job FAILED" in result.err and "the run does not count" in result.err, result.err
    assert not (tmp_path / "standards").exists()
    assert set(our_jobs(cluster, "toycrash").values()) == {"FAILED"}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("forged", [["..", "..", "escaped"], ["../../x"]], ids=["dotdot-parts", "slash-part"])
def test_a_job_reporting_an_escaping_runner_class_writes_nothing(cluster: str, tmp_path: Path, forged: list) -> None:
    work = tmp_path / "work"
    work.mkdir()
    card = hooked_card(work, "toyesc", "forge-probe:" + json.dumps(forged))
    before = sorted(str(p) for p in tmp_path.parent.rglob("*") if not p.is_relative_to(work / "hook"))
    result = run_cli("record", str(card), "--runs", "2", "--cluster", cluster, "--no-doctor")
    assert result.code == 2, result.text
    assert "found no runner class: the job reported an unusable runner class" in result.err, result.err
    assert result.err.count("\n") == 1
    after = sorted(str(p) for p in tmp_path.parent.rglob("*") if not p.is_relative_to(work / "hook"))
    assert after == before  # no standard, no lock, no folder: nowhere


@pytest.mark.slow
@pytest.mark.ray
def test_doctor_and_in_process_ray_start_their_own_ray_beside_a_running_cluster(head: RayHead, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that runs a `ray start` cluster and names it in RAY_ADDRESS: the doctor's Ray worker
    and the determinism tests' Ray start their own Ray, never join it (joining with num_cpus fails)."""
    from test_determinism import RAY_HOOK_PROBE

    from detaudit.data.card import load_card
    from detaudit.env.doctor import run_doctor

    monkeypatch.setenv("RAY_ADDRESS", head.gcs)
    card = write_card(tmp_path / "toy.toml", extra='[env]\nPYTHONHASHSEED = "0"\n')
    rows = run_doctor(load_card(card), seed=11, ray=True)
    worker = [r for r in rows if r.process.startswith("Ray worker")]
    assert worker and all(r.ok for r in rows), rows
    probe = subprocess.run([sys.executable, "-c", RAY_HOOK_PROBE, "77", "math"], capture_output=True, text=True,
                           timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout.strip().splitlines()[-1])["seeded"][0]["seed"] == 77
    # No driver joined the cluster named in RAY_ADDRESS (a job submitted there is a SUBMISSION, not a DRIVER).
    # (Ray's job client here follows RAY_ADDRESS to the GCS, in this process: ask without it.)
    monkeypatch.delenv("RAY_ADDRESS")
    assert [j.entrypoint for j in head.client().list_jobs() if str(j.type).endswith("DRIVER")] == []


def test_record_and_verify_run_cards_through_the_seam_not_the_cluster_module() -> None:
    import ast

    for flow in ("record", "verify", "trace"):
        tree = ast.parse((REPO / "detaudit" / "flows" / f"{flow}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert "detaudit.run.card_runs" in imported, flow
        assert "detaudit.run.cluster" not in imported and "detaudit.run.cluster_job" not in imported, flow


def test_a_result_counts_only_when_well_formed_and_ray_agrees(tmp_path: Path) -> None:
    from detaudit.run.cluster import JobState, take_result
    from detaudit.run.spec import RunSpec, RunStatus

    def taken(ray_status: str, **fields: object) -> tuple[JobState, object]:
        run = tmp_path / "run1"
        state = JobState(RunSpec(index=0, argv=[], env={}, workdir=run, log_path=run / "run.log",
                                 metrics_path=run / "metrics.jsonl", timeout_s=1, collect=("trace",)), job_id="j")
        good = {"status": "ok", "returncode": 0, "runner_class": ["cpu", "test"], "environment": {}, "node": "n",
                "log_tail": "", "metrics_b64": base64.b64encode(b'{"a": 1}\n').decode(), "files": {}}
        return state, take_result(state, ray_status, "", {**good, **fields})

    state, (metrics, files, _) = taken("SUCCEEDED")
    assert state.status == RunStatus.OK and metrics == b'{"a": 1}\n' and str(state.runner_class) == "cpu-test"
    for ray_status, expected in (("FAILED", RunStatus.FAILED), ("STOPPED", RunStatus.KILLED)):
        state, _ = taken(ray_status)
        assert state.status == expected and "the run does not count" in (state.error or "")
    for bad in ({"metrics_b64": "%%%"}, {"metrics_b64": 7}, {"files": {"../x": ""}}, {"files": ["trace/x"]},
                {"runner_class": ["../../x"]}, {"runner_class": "cpu"}, {"status": "fine"}):
        state, (metrics, files, tail) = taken("SUCCEEDED", **bad)
        assert state.status == RunStatus.FAILED and not files, bad
        assert state.error and state.error in tail, bad  # the run's log says why
