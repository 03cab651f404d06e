"""What one run is (``RunSpec``) and where it stands (``RunState``): data shared by the local
and cluster executors, the use cases and the renderers."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class RunStatus(StrEnum):
    """A run's state. ``pending``: submitted to a cluster, not started yet."""

    WAITING = "waiting"
    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    KILLED = "killed"

    @property
    def active(self) -> bool:
        return self in (RunStatus.PENDING, RunStatus.RUNNING)


@dataclass
class RunSpec:
    """One run: its command, its environment, and the files it lives in.

    ``env`` is the whole environment of a run started here. ``overlay`` is what the run sets on top
    of whatever environment it starts in (the card's ``env``, the metrics and run variables, trace
    variables; ``PYTHONPATH``: entries to put first): a run on another machine gets the overlay on
    top of that machine's environment, never this machine's. ``collect``: folders under the run dir
    (``trace``) whose files a run elsewhere sends back with its metrics. The run starts in ``cwd``
    (the card's folder, or the one it names) and writes its outputs under ``workdir``.
    """

    index: int  # 0-based
    argv: list[str]
    env: dict[str, str]
    workdir: Path
    log_path: Path
    metrics_path: Path
    timeout_s: float
    gpus: list[str] | None = None  # CUDA_VISIBLE_DEVICES for this run
    cwd: Path | None = None  # where the run starts (the card's folder); None: its run dir
    overlay: dict[str, str] = field(default_factory=dict)
    collect: tuple[str, ...] = ()


@dataclass
class RunState:
    spec: RunSpec
    status: RunStatus = RunStatus.WAITING
    returncode: int | None = None
    started: float | None = None
    finished: float | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    group_survived: bool = False  # its process group was still alive after SIGKILL and the grace

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.monotonic()) - self.started

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.OK
