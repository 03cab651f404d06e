"""Runtime tracing of a recipe's processes: every draw from a process-global RNG, and
(opt-in) a fingerprint of every ``nn.Module`` call, one JSONL file per process.

Off unless a run's environment carries ``DETAUDIT_TRACE``: then the ``sitecustomize`` in
``detaudit/trace/site`` (put first on the run's ``PYTHONPATH`` by :func:`trace_env`) runs
:func:`detaudit.trace.bootstrap.install` in every Python process the run starts (the main
process, Ray workers, multiprocessing children, DataLoader workers), with no change to the
recipe. Without the variable nothing here is imported and nothing is patched.

Layers: ``bootstrap``/``ledger``/``modules`` run inside recipe processes and import nothing
heavy at start-up; ``files`` reads trace dirs; ``compare`` returns data; ``report`` turns it
into English and JSON.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

MODE_ENV = "DETAUDIT_TRACE"            # "rng" or "modules"
DIR_ENV = "DETAUDIT_TRACE_DIR"         # where each process writes <process>.jsonl
KEEP_ENV = "DETAUDIT_TRACE_KEEP"       # full records per call site before the hash chain
MAIN_ENV = "DETAUDIT_TRACE_MAIN_PID"   # set by the first traced process; children inherit it
MODES = ("rng", "modules")
DEFAULT_KEEP = 16
SITE_DIR = Path(__file__).resolve().parent / "site"


TRACE_SUBDIR = "trace"  # runN/trace/


def run_trace_dir(run_dir: Path) -> Path:
    return Path(run_dir) / TRACE_SUBDIR


def trace_variables(mode: str, trace_dir: Path, keep: int | None = None) -> dict[str, str]:
    """The variables that turn tracing on for one run (``PYTHONPATH``: to prepend)."""
    if mode not in MODES:
        raise ValueError(f"unknown trace mode {mode!r} (one of {', '.join(MODES)})")
    out = {MODE_ENV: mode, DIR_ENV: str(trace_dir), MAIN_ENV: "",
           "PYTHONPATH": os.pathsep.join([str(SITE_DIR), str(SITE_DIR.parents[2])])}
    if keep is not None:
        out[KEEP_ENV] = str(keep)
    return out


def trace_hook(mode: str, keep: int | None = None) -> Callable[[Any], dict[str, str]]:
    """An ``env_hooks`` entry for ``detaudit.run.plan``: each run traces into ``runN/trace/``."""
    trace_variables(mode, Path("."), keep)  # validate the mode now, not per run

    def hook(spec: Any) -> dict[str, str]:
        return trace_variables(mode, run_trace_dir(spec.workdir), keep)

    return hook


def trace_env(mode: str, trace_dir: Path, env: dict[str, str], keep: int | None = None) -> dict[str, str]:
    """``env`` plus what turns tracing on for one run: the mode, the trace dir, and the
    ``sitecustomize`` folder first on ``PYTHONPATH`` (with this package's root after it,
    so the bootstrap is importable in every process)."""
    out = dict(env)
    variables = trace_variables(mode, trace_dir, keep)
    parts = variables.pop("PYTHONPATH").split(os.pathsep) + [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out.update(variables)
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return out
