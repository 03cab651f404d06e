"""Runs as Ray jobs on a cluster: the executor behind ``record --cluster`` and ``verify --cluster``.

Each run is one job submitted through Ray's Job Submission API
(``ray.job_submission.JobSubmissionClient``; ADDRESS is the dashboard's HTTP address such
as ``http://head:8265``, or ``auto`` for the cluster this machine belongs to). A job:

- asks for the card's resources: ``entrypoint_num_gpus = gpus_per_run`` and
  ``entrypoint_num_cpus = cpus_per_run``, so Ray starts it only where they are free and
  sets the driver's ``CUDA_VISIBLE_DEVICES`` to its GPUs;
- carries the project (the git work tree holding the card, else the card's folder) as its
  ``working_dir`` and this detaudit as a ``py_modules`` entry, plus the card's ``env``
  and the determinism variables as ``env_vars``, which every Ray worker of the job gets;
- runs ``python -m detaudit.run.cluster_job SPEC``: the run's own command and variables (its
  ``RunSpec.argv`` and ``RunSpec.overlay``: extra arguments, the card's ``env``, trace
  variables), with this machine's paths named so that the node fills in its own, in a
  node-local dir; the recipe's ``ray.init`` joins the cluster through the ``RAY_ADDRESS`` that
  Ray sets for job drivers;
- sends back its metrics, the files of the folders the spec collects (``trace/``), log tail,
  environment and runner class as one framed, checksummed, size-bounded block in the job log
  (no shared filesystem needed).

A run counts as ok only when Ray reports its job SUCCEEDED *and* the block says ok. Every
wait (set-up, the run, stopping) is bounded by the card's timeout and a fixed grace. The job
server itself (connecting, token authentication, every request bounded in time) is
``detaudit.run.cluster_server``.

``ClusterExecutor`` is the ``detaudit.run.executor.Executor`` for clusters; its ``probe()`` job
first reports the runner class of a node where the card's jobs go (so record and verify choose
the standard before any run), and every run's own class is checked against it.

Every job this batch submits is named ``detaudit-<card>-<token>-runN``. A failure, a
timeout, Ctrl-C or SIGTERM stops those jobs, and only those, and waits until Ray reports
each one stopped. ray is imported inside functions only: the tool starts without it.
"""

from __future__ import annotations

import base64
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.card import Card
from detaudit.env.determinism import DETERMINISTIC_ENV_VARS
from detaudit.errors import InputError
from detaudit.run.cluster_job import (
    MAX_RESULT_BYTES,
    PACKAGE_DIR,
    anchors_here,
    decode_result,
    encode_spec,
    portable,
)
from detaudit.run.cluster_server import MIN_REQUEST_TIMEOUT_S, JobServer, JobServerError, request_timeout
from detaudit.run.local import Interrupted, log_tail
from detaudit.run.spec import RunSpec, RunState, RunStatus
from detaudit.runner_class import RunnerClass, check_plain_name

POLL_S = 0.5
# On top of the card's timeout: runtime env set-up and the runner probe on the node.
SETUP_GRACE_S = 120.0
STOP_WAIT_S = 60.0
SUBMIT_RETRY_S = 60.0  # a job server whose agent is not up yet says "try again later"
# While runs go, the job server may stop answering for this long (a restart, a network blip)
# before the batch ends: never longer than the card's timeout, never past a run's own deadline.
OUTAGE_GRACE_S = 60.0
EXCLUDES = [".git/", ".venv/", "venv/", "__pycache__/", "*.pyc", ".pytest_cache/", ".detaudit/", "*.egg-info/"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class JobState(RunState):
    """A run that is a Ray job: the local state plus where and how it ran on the cluster."""

    job_id: str | None = None
    runner_class: RunnerClass | None = None  # detected on the node, in the run's environment
    environment: dict[str, Any] | None = None
    node: str | None = None
    error: str | None = None  # why the results could not be read back, or do not count
    job_status: str | None = None  # Ray's last word: PENDING, RUNNING, SUCCEEDED, ...
    token_source: str | None = None  # where the job server's token came from (token authentication)
    unanswered_since: float | None = field(default=None, repr=False)  # the job server stopped answering
    outage_grace_s: float = field(default=OUTAGE_GRACE_S, repr=False)
    nonce: str = field(default_factory=lambda: secrets.token_hex(8), repr=False)


class ClusterInterrupted(Interrupted):
    """Ctrl-C, SIGTERM or SIGHUP during a cluster batch; ``stopped`` names the jobs it stopped."""

    def __init__(self, signum: int, states: Sequence[RunState], stopped: list[str]) -> None:
        super().__init__(signum, states)
        self.stopped = stopped


def outage_grace(card: Card) -> float:
    """Seconds the job server may go without answering while this card's runs go."""
    return min(OUTAGE_GRACE_S, max(MIN_REQUEST_TIMEOUT_S, card.timeout_s))


class ClusterExecutor:
    """The executor of ``detaudit.run.executor`` for a cluster: each spec a Ray job at ``address``.

    ``probe()`` runs one short job that only detects the runner class and environment on a
    node where a run of the card would go (same resource request), so that record and
    verify pick the standard before any run; every run's own class is checked against it.
    """

    def __init__(self, card: Card, address: str) -> None:
        self.card = card
        self.address = address
        self.root = project_root(card)
        try:
            self.card_rel = card.path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            raise InputError(card.path, f"the card is outside the project folder {self.root} that the jobs carry") from None
        self.server = JobServer(address, request_timeout(card))

    def probe(self, card: Card, parallel: int = 1) -> tuple[dict[str, Any], RunnerClass]:
        """(environment, runner class) of a node where the card's jobs run."""
        with tempfile.TemporaryDirectory(prefix="detaudit-probe-") as tmp:
            folder = Path(tmp) / "probe"
            spec = RunSpec(index=0, argv=[], env={}, workdir=folder, log_path=folder / "probe.log",
                           metrics_path=folder / "metrics.jsonl", timeout_s=self.card.timeout_s)
            state = run_jobs(self.card, self.card_rel, self.root, [spec], self.server, probe=True)[0]
            tail = log_tail(spec.log_path, 5).strip()
        if not state.ok or not state.runner_class:
            why = state.error or (tail.splitlines()[-1] if tail else state.status)
            raise InputError(self.address, f"the probe job {state.job_id} found no runner class: {why}")
        return state.environment or {}, state.runner_class

    def run(self, specs: Sequence[RunSpec], *, parallel: int = 1, gpus_per_run: int = 0,
            on_update: Callable[[list[RunState]], None] | None = None) -> list[RunState]:
        return list(run_jobs(self.card, self.card_rel, self.root, specs, self.server, parallel=parallel,
                             on_update=on_update))


def project_root(card: Card) -> Path:
    """The folder a job carries: the git work tree holding the card, else the card's folder."""
    folder = card.card_dir
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True,
                             text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return folder
    return Path(out).resolve() if out else folder


def job_runtime_env(card: Card, root: Path, leave_out: Sequence[Path] = ()) -> dict[str, Any]:
    """The runtime env of every job of ``card``: project, detaudit, env vars, excludes."""
    excludes = list(EXCLUDES)
    for path in leave_out:  # e.g. the record's own run dirs, when they sit in the project
        try:
            excludes.append("/" + path.resolve().relative_to(root).as_posix() + "/")
        except ValueError:
            pass
    env_vars = dict(DETERMINISTIC_ENV_VARS)
    # For the job's Ray workers. Values with placeholders ({workdir}, ...) only make sense per run:
    # each run gets them, resolved on its node, with the rest of its overlay.
    env_vars.update({k: v for k, v in card.env.items() if "{" not in v})
    # The recipe's own ray.init(runtime_env=...) sets some of the same variables; let it merge.
    env_vars["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"
    return {
        "working_dir": str(root),
        "py_modules": [str(PACKAGE_DIR)],
        "excludes": excludes,
        "env_vars": env_vars,
    }


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:40]


def _job_name(card: Card, token: str, index: int) -> str:
    return f"detaudit-{_safe(card.name)}-{token}-run{index + 1}"


def carried(spec: RunSpec, root: Path) -> dict[str, Any]:
    """What a node needs of ``spec`` to run it as it would run here: its command and the variables it
    sets, with this machine's paths as anchors the node fills in, and the folders to send back."""
    anchors = anchors_here(spec.workdir.absolute(), spec.metrics_path.absolute(), root)
    return {"argv": [portable(part, anchors) for part in spec.argv],
            "env": {name: portable(value, anchors) for name, value in sorted(spec.overlay.items())},
            "collect": list(spec.collect)}


def run_jobs(
    card: Card,
    card_rel: str,
    root: Path,
    specs: Sequence[RunSpec],
    server: JobServer,
    *,
    parallel: int = 1,
    on_update: Callable[[list[RunState]], None] | None = None,
    max_bytes: int = MAX_RESULT_BYTES,
    probe: bool = False,
) -> list[JobState]:
    """Run ``specs`` as Ray jobs, at most ``parallel`` at once; stop them all at the first failure.

    Each finished run's metrics, collected files and log tail land in its spec's run dir, as
    after a local run. Raises ``ClusterInterrupted`` on Ctrl-C or SIGTERM, and
    ``JobServerError`` when the job server fails a request, after stopping every job it submitted.
    """
    leave_out = sorted({s.workdir.parent for s in specs})
    runtime_env = job_runtime_env(card, root, leave_out)
    token = secrets.token_hex(4)
    states = [JobState(spec, token_source=server.token_source, outage_grace_s=outage_grace(card)) for spec in specs]
    waiting = deque(states)
    running: list[JobState] = []
    limit = max(1, parallel)
    restore = _sigterm_as_interrupt()
    try:
        while waiting or running:
            while waiting and len(running) < limit:
                state = waiting.popleft()
                _submit(server, state, card, card_rel, root, token, runtime_env, max_bytes, probe)
                running.append(state)
            failed = None
            for state in list(running):
                _poll(server, state, max_bytes)
                if state.status.active:
                    continue
                running.remove(state)
                if not state.ok and failed is None:
                    failed = state
            if on_update:
                on_update(list(states))
            if failed is not None:
                stop_jobs(server, states)
                for state in waiting:
                    state.status = RunStatus.KILLED  # never submitted: nothing to stop
                if on_update:
                    on_update(list(states))
                return states
            time.sleep(POLL_S)
    except KeyboardInterrupt as exc:
        stopped = stop_jobs(server, states)
        raise ClusterInterrupted(getattr(exc, "signum", signal.SIGINT), states, stopped) from None
    except BaseException:
        stop_jobs(server, states)  # e.g. Ray refused a job: the ones already submitted go too
        raise
    finally:
        restore()
    return states


def _sigterm_as_interrupt() -> Callable[[], None]:
    """SIGTERM and SIGHUP end a batch like Ctrl-C does (main thread only); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)

    return restore


def _submit(server: JobServer, state: JobState, card: Card, card_rel: str, root: Path, token: str,
            runtime_env: dict[str, Any], max_bytes: int, probe: bool = False) -> None:
    spec = state.spec
    job_spec: dict[str, Any] = {"card": card_rel, "index": spec.index, "nonce": state.nonce,
                                "timeout_s": spec.timeout_s, "max_bytes": max_bytes, "probe": probe}
    if not probe:
        job_spec.update(carried(spec, root))
    name = _job_name(card, token, spec.index) if not probe else f"detaudit-{_safe(card.name)}-{token}-probe"
    # Named before it is sent: an interrupt during the request still knows what to stop.
    state.job_id = name
    try:
        _with_retry(lambda: server.call(f"accept job {name}", lambda: server.client.submit_job(
            entrypoint=f"python -m detaudit.run.cluster_job {encode_spec(job_spec)}",
            submission_id=name,
            runtime_env=runtime_env,
            entrypoint_num_cpus=card.cpus_per_run,
            entrypoint_num_gpus=card.gpus_per_run or None,
            metadata={"detaudit_card": card.name, "detaudit_batch": token, "detaudit_run": str(spec.index + 1)},
        )))
    except JobServerError:
        state.status = RunStatus.FAILED
        raise
    state.status = RunStatus.PENDING
    state.started = time.monotonic()


def _with_retry(request: Callable[[], Any], wait_s: float = SUBMIT_RETRY_S) -> Any:
    """``request()``, again while Ray answers that it is not ready yet (a head that just started)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return request()
        except JobServerError as exc:
            if "try again later" not in exc.message or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _deadline_passed(state: JobState) -> bool:
    return state.elapsed > state.spec.timeout_s + SETUP_GRACE_S


def _poll(server: JobServer, state: JobState, max_bytes: int) -> None:
    try:
        info = server.info(state.job_id or "")
    except JobServerError as exc:
        # No answer: wait a while (a restarting head, a network blip), never past the run's deadline.
        if not exc.transient:
            raise
        now = time.monotonic()
        state.unanswered_since = state.unanswered_since or now
        if now - state.unanswered_since > state.outage_grace_s or _deadline_passed(state):
            raise
        return
    state.unanswered_since = None
    status = str(info.status)
    state.job_status = status
    waited = state.elapsed
    if status == "PENDING":
        if _deadline_passed(state):
            state.error = f"waited {waited:.0f}s for the cluster to start the job ({info.message or 'pending'})"
            _give_up(server, state, RunStatus.TIMEOUT)
        return
    if status == "RUNNING":
        state.status = RunStatus.RUNNING
        if _deadline_passed(state):
            state.error = f"the job ran past the card's timeout ({state.spec.timeout_s:g}s) and its set-up grace"
            _give_up(server, state, RunStatus.TIMEOUT)
        return
    state.finished = time.monotonic()
    _collect(server, state, status, info.message or "", max_bytes)


def _give_up(server: JobServer, state: JobState, status: RunStatus) -> None:
    stop_jobs(server, [state])
    state.status = status
    state.finished = time.monotonic()
    _write_local(state, None, {}, state.error or "")


def _collect(server: JobServer, state: JobState, status: str, message: str, max_bytes: int) -> None:
    """Read the job's result block into the run's local files and state.

    The run counts as ok only when the block says so *and* Ray reports the job SUCCEEDED: a job
    that printed its results and then failed or was stopped (a crash at exit) is not a good run.
    """
    result = None
    logs = ""
    try:
        logs = server.logs(state.job_id or "")
        if len(logs) > 2 * max_bytes:
            raise ValueError(f"the job log is {len(logs)} characters, over the bound")
        result = decode_result(logs, state.nonce, max_bytes)
        if result is not None and not isinstance(result, dict):
            raise ValueError(f"the result block holds {type(result).__name__}, not a table")
    except (ValueError, zlib.error, JobServerError) as exc:
        state.error = f"cannot read the job's results: {exc}"
    if result is None:
        state.status = RunStatus.KILLED if status == "STOPPED" else RunStatus.FAILED
        state.error = state.error or f"the job ended {status} without results: {message}".rstrip(": ")
        # What the job log has (Ray's set-up messages, a traceback) is all there is.
        _write_local(state, None, {}, "\n".join(logs.splitlines()[-200:]) + f"\n[detaudit] {state.error}\n")
        return
    _write_local(state, *take_result(state, status, message, result))


def take_result(state: JobState, status: str, message: str, result: dict[str, Any]) -> tuple[bytes | None, dict[Path, bytes], str]:
    """Set ``state`` from a job's result block and Ray's last ``status`` of the job; the metrics, the
    files to write in the run dir and the log tail. Anything malformed fails the run, by name."""
    reported = result.get("status")
    state.status = RunStatus(reported) if reported in set(RunStatus) else RunStatus.FAILED
    if reported not in set(RunStatus):
        state.error = f"the job reported an unknown status {str(reported)[:40]!r}"
    returncode = result.get("returncode")
    state.returncode = returncode if isinstance(returncode, int) and not isinstance(returncode, bool) else None
    environment, node = result.get("environment"), result.get("node")
    state.environment = environment if isinstance(environment, dict) else None
    state.node = str(node)[:200] if node is not None else None
    if result.get("error"):
        state.error = str(result["error"])[:2000]  # the node's own reason wins
    try:  # the class names the standard's file: it must be plain tokens, like every class
        state.runner_class = RunnerClass.of(result["runner_class"], f"Ray job {state.job_id}") if result.get("runner_class") else None
    except InputError as exc:
        state.status, state.runner_class = RunStatus.FAILED, None
        state.error = f"the job reported an unusable runner class: {exc.message}"
    if status != "SUCCEEDED" and state.status == RunStatus.OK:
        state.status = RunStatus.KILLED if status == "STOPPED" else RunStatus.FAILED
        state.error = (f"Ray reports the job {status}{f' ({message})' if message else ''} although its log holds "
                       "a result block: the run does not count")
    try:
        encoded = result.get("metrics_b64")
        if encoded is not None and not isinstance(encoded, str):
            raise ValueError("the metrics are not base64 text")
        metrics = base64.b64decode(encoded, validate=True) if encoded else None
        files = _received_files(state.spec, result.get("files") or {})
    except ValueError as exc:
        state.status, metrics, files = RunStatus.FAILED, None, {}
        state.error = f"the job sent back unusable data: {exc}"
    tail = str(result.get("log_tail", ""))
    if state.error:
        tail += f"\n[detaudit] {state.error}\n"
    return metrics, files, tail


def _received_files(spec: RunSpec, files: dict[str, Any]) -> dict[Path, bytes]:
    """The files a job sent back, each at its place in the local run dir; ``ValueError`` for a name
    outside the folders the spec collects (``../x``, ``trace/../../x``, an absolute path)."""
    out: dict[Path, bytes] = {}
    if not isinstance(files, dict):
        raise ValueError(f"files is {type(files).__name__}, not a table")
    for name, data in files.items():
        folder, _, file_name = str(name).partition("/")
        try:
            if folder not in spec.collect:
                raise InputError(None, f"folder {folder!r} was not asked for")
            check_plain_name(file_name, "file name")
        except InputError as exc:
            raise ValueError(f"{name!r}: {exc.message}") from None
        if not isinstance(data, str):
            raise ValueError(f"{name!r}: the content is not base64 text")
        out[spec.workdir / folder / file_name] = base64.b64decode(data, validate=True)
    return out


def _write_local(state: JobState, metrics: bytes | None, files: dict[Path, bytes], log: str) -> None:
    spec = state.spec
    spec.workdir.mkdir(parents=True, exist_ok=True)
    spec.log_path.write_text(log, encoding="utf-8")
    if metrics is not None:
        spec.metrics_path.write_bytes(metrics)
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def stop_jobs(server: JobServer, states: Sequence[JobState]) -> list[str]:
    """Stop every job of ``states`` that Ray does not report finished; wait until it does.

    Returns the ids of the jobs it stopped. Only these jobs: nothing else on the cluster. Every
    wait is bounded (each request by its timeout, all of them by ``STOP_WAIT_S``).
    """
    stopped = []
    for state in states:
        if state.job_id is None or state.job_status in TERMINAL:
            continue
        try:
            status = str(server.info(state.job_id).status)
            if status not in TERMINAL:
                server.stop(state.job_id)
                stopped.append(state.job_id)
        except JobServerError as exc:
            state.error = f"could not stop job {state.job_id}: {exc.message}"
    deadline = time.monotonic() + STOP_WAIT_S
    for state in states:
        if state.job_id not in stopped:
            continue
        status = "UNKNOWN"
        while time.monotonic() < deadline:
            try:
                status = str(server.info(state.job_id).status)
            except JobServerError:  # the job server is busy or restarting: ask again until the deadline
                status = "UNKNOWN"
            if status in TERMINAL:
                break
            time.sleep(POLL_S)
        state.job_status = status
        if status not in TERMINAL:
            state.error = f"job {state.job_id} still {status} {STOP_WAIT_S:g}s after it was stopped"
        if state.status.active:
            state.status = RunStatus.KILLED
            state.finished = time.monotonic()
    return stopped
