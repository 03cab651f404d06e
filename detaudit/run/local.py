"""Run a recipe command N times, each a fresh process in its own session and process group.

Each run gets its own work dir (for its outputs), log file and metrics path; it starts in its
spec's ``cwd`` (the card's folder). A run that fails or
times out ends the batch: every started run's process group is killed (SIGTERM, then
SIGKILL after a grace period), and never anything broader than those groups. Ctrl-C does
the same and raises ``Interrupted`` (a ``KeyboardInterrupt``); so does SIGTERM or SIGHUP
inside ``interrupts_as_exceptions()`` (CI runners send SIGTERM on cancel). A second
Ctrl-C or SIGTERM during the kill grace does not stop the cleanup: it sends SIGKILL at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from detaudit.run.spec import RunSpec, RunState, RunStatus

KILL_GRACE_S = 5.0
POLL_S = 0.1


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' if there is none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def last_log_line(path: Path) -> str:
    tail = log_tail(path, 5).strip().splitlines()
    return tail[-1] if tail else ""


def visible_gpus() -> list[str]:
    """GPU ids this process may hand out: CUDA_VISIBLE_DEVICES, else those nvidia-smi lists."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [g.strip() for g in value.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def gpu_slots(gpus_per_run: int, parallel: int, gpus: Sequence[str] | None = None) -> list[list[str]] | None:
    """Disjoint GPU sets for concurrent runs (None when runs need no GPU)."""
    if gpus_per_run <= 0:
        return None
    gpus = list(gpus if gpus is not None else visible_gpus())
    slots = [gpus[i : i + gpus_per_run] for i in range(0, len(gpus) - gpus_per_run + 1, gpus_per_run)]
    return slots[: max(1, parallel)]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP while runs were going; every run's process group was killed.

    ``states``: the runs' final states (empty when no run had started); ``repeated``: a
    second signal arrived during the kill grace, so SIGKILL was sent at once.
    """

    def __init__(self, signum: int = signal.SIGINT, states: Sequence[RunState] = (), repeated: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.states = list(states)
        self.repeated = repeated

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


_TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP raise ``Interrupted``, so cleanup (kills, the lock) runs."""
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in _TERMINATING}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Inside: Ctrl-C, SIGTERM and SIGHUP are recorded in the yielded list, not raised."""
    caught: list[int] = []
    if not _in_main_thread():
        yield caught
        return
    sigs = (signal.SIGINT, *_TERMINATING)
    old = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in sigs}
    try:
        yield caught
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _kill_groups(states: Sequence[RunState], hurry: list[int] | None = None) -> None:
    """SIGTERM every run's process group, SIGKILL what is left after the grace, reap.

    All groups get each signal together, so N runs take one grace, not N. A non-empty
    ``hurry`` (signals that arrived meanwhile) cuts the SIGTERM grace short.
    """
    procs = [s.proc for s in states if s.proc is not None]
    for proc in procs:
        proc.poll()
    alive = [p for p in procs if _group_alive(p.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not alive:
            break
        for proc in alive:
            try:
                os.killpg(proc.pid, sig)  # the run's own group: pgid == pid (start_new_session)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < deadline:
            if sig == signal.SIGTERM and hurry:
                break
            time.sleep(POLL_S)
            for proc in alive:
                proc.poll()
            alive = [p for p in alive if _group_alive(p.pid)]
    for proc in procs:
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    survivors = {p.pid for p in procs if _group_alive(p.pid)}
    for state in states:
        if state.proc is not None:
            state.group_survived = state.proc.pid in survivors


def _kill_group(state: RunState) -> None:
    _kill_groups([state])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start(state: RunState) -> None:
    spec = state.spec
    spec.workdir.mkdir(parents=True, exist_ok=True)
    env = dict(spec.env)
    if spec.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.gpus)
    log = open(spec.log_path, "wb")
    try:
        state.proc = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd or spec.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        log.write(f"detaudit: cannot start {spec.argv[0]!r}: {exc}\n".encode())
        state.status = RunStatus.FAILED
        state.returncode = 127
        state.started = state.finished = time.monotonic()
        return
    finally:
        log.close()
    state.started = time.monotonic()
    state.status = RunStatus.RUNNING


def run_batch(
    specs: Sequence[RunSpec],
    *,
    parallel: int = 1,
    gpu_sets: list[list[str]] | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> list[RunState]:
    """Run ``specs``, at most ``parallel`` at once; stop everything at the first failure.

    With ``gpu_sets`` each concurrent run gets one set (as CUDA_VISIBLE_DEVICES), and no
    two running runs share a set. Returns every run's final state.
    """
    states = [RunState(spec) for spec in specs]
    waiting = deque(states)
    free_sets: deque[list[str]] | None = deque(gpu_sets) if gpu_sets else None
    limit = max(1, parallel)
    if free_sets is not None:
        limit = min(limit, len(free_sets))
    running: dict[int, list[str] | None] = {}  # spec index -> its GPU set
    by_index = {state.spec.index: state for state in states}
    try:
        while waiting or running:
            while waiting and len(running) < limit:
                state = waiting.popleft()
                state.spec.gpus = free_sets.popleft() if free_sets is not None else None
                running[state.spec.index] = state.spec.gpus
                _start(state)
            failed = None
            for index in list(running):
                state = by_index[index]
                if state.status == RunStatus.RUNNING:
                    code = state.proc.poll() if state.proc else 127
                    if code is None:
                        if time.monotonic() - (state.started or 0) > state.spec.timeout_s:
                            state.status = RunStatus.TIMEOUT
                            _kill_group(state)
                            state.finished = time.monotonic()
                        else:
                            continue
                    else:
                        state.returncode = code
                        state.finished = time.monotonic()
                        state.status = RunStatus.OK if code == 0 else RunStatus.FAILED
                        # Whatever the run left behind in its group (a forked daemon) goes too.
                        _kill_group(state)
                gpus = running.pop(index)
                if free_sets is not None and gpus is not None:
                    free_sets.append(gpus)
                if not state.ok and failed is None:
                    failed = state
            if on_update:
                on_update(states)
            if failed is not None:
                caught = _stop_all(states)
                if caught:
                    raise Interrupted(caught[0], states, repeated=len(caught) > 1)
                if on_update:
                    on_update(states)
                return states
            time.sleep(POLL_S)
    except KeyboardInterrupt as exc:
        caught = _stop_all(states)
        signum = getattr(exc, "signum", signal.SIGINT)
        raise Interrupted(signum, states, repeated=bool(caught)) from None
    return states


def _stop_all(states: Sequence[RunState]) -> list[int]:
    """Kill every run's process group (also finished runs': a daemon they left behind).

    Returns the signals that arrived meanwhile: they hurried the kill, never stopped it.
    """
    with _signals_deferred() as caught:
        _kill_groups(states, hurry=caught)
        now = time.monotonic()
        for state in states:
            if state.status == RunStatus.RUNNING:
                state.status = RunStatus.KILLED
                state.finished = now
    return caught
