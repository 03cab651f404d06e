"""What happened to the runs themselves: failures with their log tails, interrupts, cluster jobs,
work dirs, est_time overruns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from detaudit.render.console import PREFIX
from detaudit.runner_class import RunnerClass, class_text

if TYPE_CHECKING:
    from detaudit.run.spec import RunState

# The run modules (subprocess, threading: ~7 ms) are imported where runs are printed: a command that
# ran nothing (verify --metrics, record --metrics) prints its work dir note without them.


def interrupted_message(signal_name: str, states: list[Any], repeated: bool, written: str) -> str:
    """What an interrupted record or verify did to its runs, as it happened.

    ``written`` says what became of the output ("no standard written").
    """
    started = [s for s in states if s.proc is not None]
    how = f"interrupted ({signal_name}{', again: SIGKILL at once' if repeated else ''})"
    if not started:
        return f"{how}: no run was running; {written}"
    survived = [s.spec.index + 1 for s in started if s.group_survived]
    killed = [s.spec.index + 1 for s in started if not s.group_survived]
    parts = []
    if killed:
        parts.append(f"killed the process group{'s' if len(killed) > 1 else ''} of run{'s' if len(killed) > 1 else ''} "
                     + ", ".join(map(str, killed)))
    if survived:
        pids = ", ".join(str(s.proc.pid) for s in started if s.group_survived)
        parts.append(f"could NOT kill the process groups of runs {', '.join(map(str, survived))} (pgid {pids}); "
                     "they may still be running")
    return f"{how}: {'; '.join(parts)}; {written}"


def job_lines(states: list[Any]) -> list[str]:
    """Where each cluster run ran: its Ray job id, node and runner class, and where the token for a
    job server with token authentication came from (local runs: none)."""
    lines = []
    for s in states:
        if getattr(s, "job_id", None) and s.status not in ("waiting", "killed"):
            cls = class_text(s.runner_class)
            token = f" (job server token from {s.token_source})" if getattr(s, "token_source", None) else ""
            lines.append(f"run {s.spec.index + 1}: Ray job {s.job_id}{token} on {s.node or 'an unknown node'}, "
                         f"runner class {cls}")
    return lines


def stopped_jobs_message(states: list[Any]) -> str | None:
    """The cluster jobs a failed batch stopped ('' when it stopped none); None for local runs."""
    if not any(getattr(s, "job_id", None) for s in states):
        return None
    stopped = [s.job_id for s in states if s.status == "killed" and getattr(s, "job_id", None)]
    return f"stopped Ray jobs {', '.join(stopped)}" if stopped else ""


def cluster_interrupted_message(signal_name: str, stopped: list[str], written: str) -> str:
    """What an interrupted cluster record or verify did: the jobs it stopped, by id."""
    jobs = f"stopped Ray jobs {', '.join(stopped)}" if stopped else "no job of this record was running"
    return f"interrupted ({signal_name}): {jobs}; {written}"


def runner_mismatch_message(expected: RunnerClass | None, states: list[Any], written: str) -> str:
    """Cluster runs that landed on another runner class than the one their standard is for."""
    other = sorted({str(s.runner_class) for s in states if getattr(s, "runner_class", None)
                    and s.runner_class != expected})
    return (f"runs ran on different runner classes ({class_text(expected)} and {', '.join(other)}); bitwise "
            f"agreement is only promised within one class: {written}")


def seconds_text(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}s" if x >= 10 else f"{x:.1f}s"


def est_time_warning(card_name: str, est_time: float, elapsed: float) -> str:
    """The warning after a run that took longer than its card's ``est_time``."""
    return (f"{card_name}: the run took {seconds_text(elapsed)}, over the card's est_time of {seconds_text(est_time)}; "
            "raise est_time so suite plans stay true")


def runs_document(states: list[Any]) -> list[dict[str, Any]]:
    """Each run's outcome (no timings: a report of the same runs is byte-identical)."""
    return [{"run": s.spec.index + 1, "status": s.status, "returncode": s.returncode,
             "log": str(s.spec.log_path), "metrics": str(s.spec.metrics_path),
             "gpus": s.spec.gpus} for s in states if s is not None]


def print_failed_runs(console: Console, states: list[RunState]) -> None:
    """Each failed or timed-out run with the tail of its log; then what was stopped or killed."""
    from detaudit.run.local import log_tail
    from detaudit.run.spec import RunStatus

    for s in states:
        if s.status in (RunStatus.FAILED, RunStatus.TIMEOUT):
            why = f"exit code {s.returncode}" if s.status == RunStatus.FAILED else f"timed out after {s.spec.timeout_s:g}s"
            console.print(f"[red]{PREFIX} run {s.spec.index + 1} {why}[/red]; log {escape(str(s.spec.log_path))}:")
            for line in log_tail(s.spec.log_path, 30).splitlines():  # a line at a time: the console prints one line each
                console.print(escape(line), markup=True)
    jobs = stopped_jobs_message(states)
    if jobs is not None:  # --cluster runs: the Ray jobs stopped, by id
        if jobs:
            console.print(f"{PREFIX} {escape(jobs)}")
        return
    killed = [s.spec.index + 1 for s in states if s.status == RunStatus.KILLED]
    if killed:
        console.print(f"{PREFIX} killed the process groups of runs {', '.join(map(str, killed))}")


def print_jobs(console: Console, states: list[RunState]) -> None:
    for line in job_lines(states):
        console.print(f"{PREFIX} {escape(line)}")


def print_workdir_note(console: Console, workdir: Path | None, removed: bool, ok: bool) -> None:
    """Whether the run dirs were removed (every run passed) or kept for inspection."""
    if workdir is None:
        return
    if removed:
        console.print(f"{PREFIX} removed the run dir {escape(str(workdir))} (every run passed)")
    elif not ok:
        console.print(f"{PREFIX} run dirs kept for inspection: {escape(str(workdir))}")


def print_interrupted(console: Console, exc: KeyboardInterrupt, written: str) -> None:
    """What an interrupt did to the runs (local process groups, or the Ray jobs it stopped)."""
    stopped = getattr(exc, "stopped", None)
    signal_name = getattr(exc, "signal_name", "SIGINT")
    if stopped is not None:
        message = cluster_interrupted_message(signal_name, stopped, written)
    else:
        message = interrupted_message(signal_name, getattr(exc, "states", []), getattr(exc, "repeated", False), written)
    console.print(f"[red]{PREFIX} {escape(message)}[/red]")


def print_est_time_warning(console: Console, card_name: str, est_time: float, elapsed: float) -> None:
    console.print(f"[yellow]{PREFIX} warning: {escape(est_time_warning(card_name, est_time, elapsed))}[/yellow]")
