"""Perf metrics (``perf/*``, never compared): start-up marks of every process, phase times of a call.

Wall-clock marks (``time.time()``) are comparable across the run's processes on one host; the
driver turns them into the start-up timeline of rollout 0's metrics line.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def process_start_time() -> float | None:
    """Wall-clock time (``time.time()``) at which this process started, or None off Linux.

    From /proc (centisecond resolution): tells an actor's process spawn and imports apart
    from its own start-up, and shows whether Ray handed it a prestarted worker.
    """
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks since boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime_s - started_s)
    except (OSError, ValueError, IndexError):
        return None


class StartupMarks:
    """Wall-clock marks of an actor's start-up: ``process`` (when known), ``init``, then the
    actor's own (``setup``, each model part, ``ready``)."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        started = process_start_time()
        if started is not None:
            self.marks["process"] = started
        self.mark("init")

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()


class PhaseClock:
    """Wall time of the phases of a call, the device synchronised at each lap."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.times: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.times[phase] = self.times.get(phase, 0.0) + now - self._last
        self._last = now


def peak_memory(device: Any) -> dict[str, float]:
    """This process's peak GPU memory so far (GiB): what its tensors held at most, and what the
    caching allocator reserved at most (what other processes on the GPU could not have). Empty off
    the GPU."""
    if getattr(device, "type", "cpu") != "cuda":
        return {}
    import torch

    return {"allocated": torch.cuda.max_memory_allocated(device) / 2**30,
            "reserved": torch.cuda.max_memory_reserved(device) / 2**30}


def memory_metrics(peaks: dict[str, dict[str, float]]) -> dict[str, float]:
    """``perf/memory/<process>_peak_{allocated,reserved}_gib`` for the driver's perf line."""
    return {f"perf/memory/{who}_peak_{kind}_gib": round(value, 3) for who, peak in peaks.items()
            for kind, value in peak.items()}


def python_workers_started(ray: Any) -> int | None:
    """How many Python worker processes this run's own Ray has started (one core-worker log each),
    or None where Ray does not say (its node object is Ray's private API)."""
    try:
        logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    except (AttributeError, TypeError):
        return None
    return sum(1 for _ in logs.glob("python-core-worker-*.log"))


def startup_timeline(driver: dict[str, float], actor_marks: dict[str, dict[str, float]]) -> dict[str, float]:
    """``perf/startup/<process>/<mark>``: seconds from the driver's start to each start-up mark
    (the driver's and every actor's), for the first rollout's metrics line."""
    start = driver["start"]
    named = {"driver": driver, **actor_marks}
    return {f"perf/startup/{who}/{mark}": round(t - start, 3) for who, marks in named.items()
            for mark, t in marks.items() if mark != "start"}
