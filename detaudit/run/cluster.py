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
- runs ``python -m detaudit.run.cluster_job SPEC``: the card's command as a local record
  runs it, in a node-local dir; the recipe's ``ray.init`` joins the cluster through the
  ``RAY_ADDRESS`` that Ray sets for job drivers;
- sends back its metrics, log tail, environment and runner class as one framed,
  checksummed, size-bounded block in the job log (no shared filesystem needed).

``ClusterExecutor`` plugs this into ``detaudit.run.plan``; its ``probe()`` job first reports the
runner class of a node where the card's jobs go (so record and verify choose the standard
before any run), and every run's own class is checked against it (``runner_mismatch``).

Every job this batch submits is named ``detaudit-<card>-<token>-runN``. A failure, a
timeout, Ctrl-C or SIGTERM stops those jobs, and only those, and waits until Ray reports
each one stopped. ray is imported inside functions only: the tool starts without it.
"""

from __future__ import annotations

import logging
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from detaudit.data.card import Card
from detaudit.env.determinism import DETERMINISTIC_ENV_VARS
from detaudit.errors import InputError
from detaudit.run.cluster_job import MAX_RESULT_BYTES, decode_result, encode_spec
from detaudit.run.local import Interrupted, log_tail
from detaudit.run.spec import RunSpec, RunState, RunStatus
from detaudit.runner_class import RunnerClass

POLL_S = 0.5
# On top of the card's timeout: runtime env set-up and the runner probe on the node.
SETUP_GRACE_S = 120.0
STOP_WAIT_S = 60.0
SUBMIT_RETRY_S = 60.0  # a job server whose agent is not up yet says "try again later"  # Ray sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s)
EXCLUDES = [".git/", ".venv/", "venv/", "__pycache__/", "*.pyc", ".pytest_cache/", ".detaudit/", "*.egg-info/"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class JobState(RunState):
    """A run that is a Ray job: the local state plus where and how it ran on the cluster."""

    job_id: str | None = None
    runner_class: RunnerClass | None = None  # detected on the node, in the run's environment
    environment: dict[str, Any] | None = None
    node: str | None = None
    error: str | None = None  # why the results could not be read back
    job_status: str | None = None  # Ray's last word: PENDING, RUNNING, SUCCEEDED, ...
    nonce: str = field(default_factory=lambda: secrets.token_hex(8), repr=False)


class ClusterInterrupted(Interrupted):
    """Ctrl-C, SIGTERM or SIGHUP during a cluster batch; ``stopped`` names the jobs it stopped."""

    def __init__(self, signum: int, states: Sequence[RunState], stopped: list[str]) -> None:
        super().__init__(signum, states)
        self.stopped = stopped


class ClusterExecutor:
    """An executor for ``detaudit.run.plan``: each spec a Ray job on the cluster at ``address``.

    ``probe()`` runs one short job that only detects the runner class and environment on a
    node where a run of the card would go (same resource request), so that record and
    verify pick the standard before any run; every run's own class is checked against it.
    """

    def __init__(self, card: Card, card_path: str | Path, address: str, extra_args: Sequence[str] = ()) -> None:
        self.card = card
        self.card_path = Path(card_path)
        self.address = address
        self.extra_args = tuple(extra_args)
        self.client = connect(address)

    def probe(self) -> tuple[dict[str, Any], RunnerClass]:
        """(environment, runner class) of a node where the card's jobs run."""
        with tempfile.TemporaryDirectory(prefix="detaudit-probe-") as tmp:
            folder = Path(tmp) / "probe"
            spec = RunSpec(index=0, argv=[], env={}, workdir=folder, log_path=folder / "probe.log",
                           metrics_path=folder / "metrics.jsonl", timeout_s=self.card.timeout_s)
            state = run_jobs(self.card, self.card_path, [spec], self.address, client=self.client, probe=True)[0]
            tail = log_tail(spec.log_path, 5).strip()
        if not state.ok or not state.runner_class:
            why = state.error or tail.splitlines()[-1] if (state.error or tail) else state.status
            raise InputError(self.address, f"the probe job {state.job_id} found no runner class: {why}")
        return state.environment or {}, state.runner_class

    def __call__(self, specs: Sequence[RunSpec], *, parallel: int = 1, gpus_per_run: int = 0,
                 on_update: Callable[[list[RunState]], None] | None = None) -> list[RunState]:
        return list(run_jobs(self.card, self.card_path, specs, self.address, parallel=parallel,
                             extra_args=self.extra_args, on_update=on_update, client=self.client))


def runner_mismatch(states: Sequence[RunState], expected: RunnerClass) -> list[RunState]:
    """Runs that report a runner class other than ``expected`` (local runs report none)."""
    return [s for s in states if getattr(s, "runner_class", None) not in (None, expected)]


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
    import detaudit

    excludes = list(EXCLUDES)
    for path in leave_out:  # e.g. the record's own run dirs, when they sit in the project
        try:
            excludes.append("/" + path.resolve().relative_to(root).as_posix() + "/")
        except ValueError:
            pass
    env_vars = dict(DETERMINISTIC_ENV_VARS)
    # Values with placeholders ({workdir}, ...) only make sense per run: the job sets those itself.
    env_vars.update({k: v for k, v in card.env.items() if "{" not in v})
    # The recipe's own ray.init(runtime_env=...) sets some of the same variables; let it merge.
    env_vars["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"
    return {
        "working_dir": str(root),
        "py_modules": [str(Path(detaudit.__file__).resolve().parent)],
        "excludes": excludes,
        "env_vars": env_vars,
    }


def connect(address: str) -> Any:
    """A JobSubmissionClient for ``address``; ``InputError`` when no job server answers there."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise InputError(address, f"--cluster needs ray[default] installed here ({exc})") from None
    # Ray logs each package upload at INFO on stderr; detaudit prints its own progress.
    for name in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError: all mean "not reachable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(address, f"cannot reach a Ray job server: {first}") from None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:40]


def _job_name(card: Card, token: str, index: int) -> str:
    return f"detaudit-{_safe(card.name)}-{token}-run{index + 1}"


def run_jobs(
    card: Card,
    card_path: Path,
    specs: Sequence[RunSpec],
    address: str,
    *,
    parallel: int = 1,
    extra_args: tuple[str, ...] = (),
    on_update: Callable[[list[RunState]], None] | None = None,
    max_bytes: int = MAX_RESULT_BYTES,
    client: Any = None,
    probe: bool = False,
) -> list[JobState]:
    """Run ``specs`` as Ray jobs, at most ``parallel`` at once; stop them all at the first failure.

    Each finished run's metrics and log tail land at its spec's ``metrics_path`` and
    ``log_path``, as after a local run. Raises ``ClusterInterrupted`` on Ctrl-C or SIGTERM
    after stopping every job it submitted.
    """
    client = client if client is not None else connect(address)
    root = project_root(card)
    try:
        card_rel = card_path.resolve().relative_to(root).as_posix()
    except ValueError:
        raise InputError(card_path, f"the card is outside the project folder {root} that the jobs carry") from None
    leave_out = sorted({s.workdir.parent for s in specs})
    runtime_env = job_runtime_env(card, root, leave_out)
    token = secrets.token_hex(4)
    states = [JobState(spec) for spec in specs]
    waiting = deque(states)
    running: list[JobState] = []
    limit = max(1, parallel)
    restore = _sigterm_as_interrupt()
    try:
        while waiting or running:
            while waiting and len(running) < limit:
                state = waiting.popleft()
                _submit(client, state, card, card_rel, token, runtime_env, extra_args, max_bytes, probe)
                running.append(state)
            failed = None
            for state in list(running):
                _poll(client, state, max_bytes)
                if state.status.active:
                    continue
                running.remove(state)
                if not state.ok and failed is None:
                    failed = state
            if on_update:
                on_update(list(states))
            if failed is not None:
                stop_jobs(client, states)
                for state in waiting:
                    state.status = RunStatus.KILLED  # never submitted: nothing to stop
                if on_update:
                    on_update(list(states))
                return states
            time.sleep(POLL_S)
    except KeyboardInterrupt as exc:
        stopped = stop_jobs(client, states)
        raise ClusterInterrupted(getattr(exc, "signum", signal.SIGINT), states, stopped) from None
    except BaseException:
        stop_jobs(client, states)  # e.g. Ray refused a job: the ones already submitted go too
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
    return lambda: [signal.signal(sig, previous) for sig, previous in old.items()] and None


def _submit(client: Any, state: JobState, card: Card, card_rel: str, token: str, runtime_env: dict[str, Any],
            extra_args: tuple[str, ...], max_bytes: int, probe: bool = False) -> None:
    spec = state.spec
    job_spec = {"card": card_rel, "index": spec.index, "extra_args": list(extra_args), "nonce": state.nonce,
                "timeout_s": spec.timeout_s, "max_bytes": max_bytes, "probe": probe}
    name = _job_name(card, token, spec.index) if not probe else f"detaudit-{_safe(card.name)}-{token}-probe"
    # Named before it is sent: an interrupt during the request still knows what to stop.
    state.job_id = name
    try:
        _with_retry(lambda: client.submit_job(
            entrypoint=f"python -m detaudit.run.cluster_job {encode_spec(job_spec)}",
            submission_id=name,
            runtime_env=runtime_env,
            entrypoint_num_cpus=card.cpus_per_run,
            entrypoint_num_gpus=card.gpus_per_run or None,
            metadata={"detaudit_card": card.name, "detaudit_batch": token, "detaudit_run": str(spec.index + 1)},
        ))
    except Exception as exc:
        state.status = RunStatus.FAILED
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(runtime_env["working_dir"], f"Ray did not accept job {name}: {first}") from None
    state.status = RunStatus.PENDING
    state.started = time.monotonic()


def _with_retry(request: Callable[[], Any], wait_s: float = SUBMIT_RETRY_S) -> Any:
    """``request()``, again while Ray answers that it is not ready yet (a head that just started)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return request()
        except RuntimeError as exc:
            if "try again later" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _poll(client: Any, state: JobState, max_bytes: int) -> None:
    info = client.get_job_info(state.job_id)
    status = str(info.status)
    state.job_status = status
    waited = state.elapsed
    if status == "PENDING":
        if waited > state.spec.timeout_s + SETUP_GRACE_S:
            state.error = f"waited {waited:.0f}s for the cluster to start the job ({info.message or 'pending'})"
            _give_up(client, state, RunStatus.TIMEOUT)
        return
    if status == "RUNNING":
        state.status = RunStatus.RUNNING
        if waited > state.spec.timeout_s + SETUP_GRACE_S:
            state.error = f"the job ran past the card's timeout ({state.spec.timeout_s:g}s) and its set-up grace"
            _give_up(client, state, RunStatus.TIMEOUT)
        return
    state.finished = time.monotonic()
    _collect(client, state, status, info.message or "", max_bytes)


def _give_up(client: Any, state: JobState, status: RunStatus) -> None:
    stop_jobs(client, [state])
    state.status = status
    state.finished = time.monotonic()
    _write_local(state, None, state.error or "")


def _collect(client: Any, state: JobState, status: str, message: str, max_bytes: int) -> None:
    """Read the job's result block into the run's local files and state."""
    result = None
    logs = ""
    try:
        logs = client.get_job_logs(state.job_id)
        if len(logs) > 2 * max_bytes:
            raise ValueError(f"the job log is {len(logs)} characters, over the bound")
        result = decode_result(logs, state.nonce, max_bytes)
    except Exception as exc:
        state.error = f"cannot read the job's results: {exc}"
    if result is None:
        state.status = RunStatus.KILLED if status == "STOPPED" else RunStatus.FAILED
        state.error = state.error or f"the job ended {status} without results: {message}".rstrip(": ")
        # What the job log has (Ray's set-up messages, a traceback) is all there is.
        _write_local(state, None, "\n".join(logs.splitlines()[-200:]) + f"\n[detaudit] {state.error}\n")
        return
    state.status = RunStatus(result["status"]) if result.get("status") in set(RunStatus) else RunStatus.FAILED
    state.returncode = result.get("returncode")
    try:  # the class names the standard's file: it must be plain tokens, like every class
        state.runner_class = RunnerClass.of(result["runner_class"], f"Ray job {state.job_id}") if result.get("runner_class") else None
    except InputError as exc:
        state.status, state.runner_class = RunStatus.FAILED, None
        state.error = f"the job reported an unusable runner class: {exc.message}"
    state.environment = result.get("environment")
    state.node = result.get("node")
    if result.get("error"):
        state.error = str(result["error"])
    metrics = None
    if result.get("metrics_b64"):
        import base64

        metrics = base64.b64decode(result["metrics_b64"])
    tail = str(result.get("log_tail", ""))
    if state.error:
        tail += f"\n[detaudit] {state.error}\n"
    _write_local(state, metrics, tail)


def _write_local(state: JobState, metrics: bytes | None, log: str) -> None:
    spec = state.spec
    spec.workdir.mkdir(parents=True, exist_ok=True)
    spec.log_path.write_text(log, encoding="utf-8")
    if metrics is not None:
        spec.metrics_path.write_bytes(metrics)


def stop_jobs(client: Any, states: Sequence[JobState]) -> list[str]:
    """Stop every job of ``states`` that Ray does not report finished; wait until it does.

    Returns the ids of the jobs it stopped. Only these jobs: nothing else on the cluster.
    """
    stopped = []
    for state in states:
        if state.job_id is None or state.job_status in TERMINAL:
            continue
        try:
            status = str(client.get_job_info(state.job_id).status)
            if status not in TERMINAL:
                client.stop_job(state.job_id)
                stopped.append(state.job_id)
        except Exception as exc:
            state.error = f"could not stop job {state.job_id}: {exc}"
    deadline = time.monotonic() + STOP_WAIT_S
    for state in states:
        if state.job_id not in stopped:
            continue
        status = "UNKNOWN"
        while time.monotonic() < deadline:
            try:
                status = str(client.get_job_info(state.job_id).status)
            except Exception:  # the job server is busy or restarting: ask again until the deadline
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
