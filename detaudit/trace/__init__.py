"""Runtime tracing of a recipe's processes: every draw from a process-global RNG, and
(opt-in) a fingerprint of every ``nn.Module`` call, one JSONL file per process.

Off unless a run's environment carries ``DETAUDIT_TRACE`` (or ``DETAUDIT_PERTURB``, for
``--perturb-schedule``: ``perturb.py``): then the ``sitecustomize`` in
``detaudit/trace/site`` (put first on the run's ``PYTHONPATH`` by :func:`trace_env`) runs
:func:`detaudit.trace.bootstrap.install` in every Python process the run starts (the main
process, Ray workers, multiprocessing children, DataLoader workers), with no change to the
recipe. Without the variable nothing here is imported and nothing is patched.

Layers: inside recipe processes, importing nothing heavy at start-up: ``bootstrap`` (and the
``recorder`` with ``sites``, ``identity``, ``imports``, ``notes``), the hooks ``ledger`` (draws),
``children``, ``modules``, ``ops``, ``arrival`` (arrival order), ``seeds`` (seed values),
``parity_capture`` (module outputs), ``ray_tasks``, with ``frames``; and ``perturb`` (the
schedule). In the tool: ``files`` reads trace dirs; ``compare``, ``arrival_order``,
``seed_repeats`` and ``parity`` return data; ``detaudit.render`` turns it into English and JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODE_ENV = "DETAUDIT_TRACE"            # "rng" or "modules"
DIR_ENV = "DETAUDIT_TRACE_DIR"         # where each process writes <process>.<pid>.jsonl
KEEP_ENV = "DETAUDIT_TRACE_KEEP"       # full records per call site before the hash chain
MAIN_ENV = "DETAUDIT_TRACE_MAIN_PID"   # set by the first traced process; children inherit it
CARD_ENV = "DETAUDIT_TRACE_CARD"       # the card's name: every ledger says which card it traced
OPS_ENV = "DETAUDIT_TRACE_OPS"         # "0": modules mode without the torch-op fingerprints
PARITY_ENV = "DETAUDIT_TRACE_PARITY"   # "A:B": keep the module outputs of processes A and B (parity.py)
PERTURB_ENV = "DETAUDIT_PERTURB"       # the run's schedule number: completions are delayed (perturb.py)
MODES = ("rng", "modules")
DEFAULT_KEEP = 16
MAX_KEEP = 1 << 20


def parse_keep(text: str | None) -> int:
    """``DETAUDIT_TRACE_KEEP`` as a number of kept records per call site; ValueError says why."""
    if text is None or text == "":
        return DEFAULT_KEEP
    if not text.isdigit() or not text.isascii() or int(text) > MAX_KEEP:
        raise ValueError(f"{KEEP_ENV}={text!r} is not a whole number from 0 to {MAX_KEEP}")
    return int(text)
SITE_DIR = Path(__file__).resolve().parent / "site"


TRACE_SUBDIR = "trace"  # runN/trace/


def run_trace_dir(run_dir: Path) -> Path:
    return Path(run_dir) / TRACE_SUBDIR


def trace_variables(mode: str, trace_dir: Path, keep: int | None = None,
                    card: str | None = None) -> dict[str, str]:
    """The variables that turn tracing on for one run (``PYTHONPATH``: to prepend)."""
    if mode not in MODES:
        raise ValueError(f"unknown trace mode {mode!r} (one of {', '.join(MODES)})")
    # Only the site hook goes on the path: it loads detaudit from beside itself, so that the run
    # never imports anything else from detaudit's install folder (in an installed detaudit, the
    # tool's site-packages) ahead of its own.
    out = {MODE_ENV: mode, DIR_ENV: str(trace_dir), MAIN_ENV: "", "PYTHONPATH": str(SITE_DIR)}
    if keep is not None:
        out[KEEP_ENV] = str(parse_keep(str(keep)))
    if card is not None:
        out[CARD_ENV] = card
    return out


def perturb_hook(first: int = 1) -> Callable[[Any], dict[str, str]]:
    """An ``env_hooks`` entry: run ``N`` (0-based index) gets schedule number ``first + N``, and the
    site hook that delays its completions (``perturb.py``)."""
    def hook(spec: Any) -> dict[str, str]:
        return {PERTURB_ENV: str(first + spec.index), "PYTHONPATH": str(SITE_DIR)}

    return hook


def trace_hook(mode: str, keep: int | None = None, card: str | None = None) -> Callable[[Any], dict[str, str]]:
    """An ``env_hooks`` entry for ``detaudit.run.plan``: each run traces into ``runN/trace/``.

    A ``DETAUDIT_TRACE_KEEP`` in a run's environment that the tracer could not read is a
    ``UsageError`` here, before anything runs (in the run it would leave every process
    untraced)."""
    from detaudit.errors import UsageError

    trace_variables(mode, Path("."), keep, card)  # validate the mode now, not per run

    def hook(spec: Any) -> dict[str, str]:
        if keep is None:
            try:
                parse_keep(spec.env.get(KEEP_ENV))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        return trace_variables(mode, run_trace_dir(spec.workdir), keep, card)

    return hook


def trace_env(mode: str, trace_dir: Path, env: dict[str, str], keep: int | None = None,
              card: str | None = None) -> dict[str, str]:
    """``env`` plus what turns tracing on for one run: the mode, the trace dir, and the
    ``sitecustomize`` folder first on ``PYTHONPATH`` (it imports the bootstrap from the
    detaudit beside it, in every process)."""
    out = dict(env)
    variables = trace_variables(mode, trace_dir, keep, card)
    parts = variables.pop("PYTHONPATH").split(os.pathsep) + [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out.update(variables)
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return out
