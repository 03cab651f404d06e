"""``detaudit trace CARD``: one traced run, its per-process summary, and ``--save`` /
``--against`` to compare traces across machines.

A saved trace is a folder: ``meta.json`` (schema, card, mode, command, machine) and the run's
``trace/*.jsonl``. It is written to a temporary sibling and renamed into place, never over an
existing folder.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from detaudit.card import load_card
from detaudit.errors import InputError, UsageError
from detaudit.plan import make_specs, prepare_workdir
from detaudit.runner import RunState, interrupts_as_exceptions, run_batch
from detaudit.trace import MODES, run_trace_dir, trace_hook
from detaudit.trace.compare import Collision, TraceComparison, UnseededUse, compare_traces, seed_collisions, unseeded_uses
from detaudit.trace.files import RunTrace, read_trace

SAVED_SCHEMA = "detaudit/trace/1"


@dataclass
class TraceResult:
    """``status``: ok, run-failed."""

    status: str
    mode: str
    run: RunState
    trace_dir: Path
    trace: RunTrace | None = None
    unseeded: list[UnseededUse] = field(default_factory=list)
    collisions: list[Collision] = field(default_factory=list)
    comparison: TraceComparison | None = None
    saved: Path | None = None
    against: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and (self.comparison is None or self.comparison.identical)


def read_saved(directory: str | Path) -> tuple[dict[str, Any], RunTrace]:
    """A trace saved with ``--save``: its meta and its processes."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(meta_path, "not a saved trace (no meta.json; save one with `detaudit trace CARD --save DIR`)") from None
    except (OSError, ValueError) as exc:
        raise InputError(meta_path, f"cannot read saved trace: {exc}") from None
    if not isinstance(meta, dict) or meta.get("schema") != SAVED_SCHEMA:
        raise InputError(meta_path, f"not a saved trace (schema is not {SAVED_SCHEMA})")
    return meta, read_trace(directory / "trace")


def machine() -> dict[str, str]:
    """Enough to tell two machines apart in a saved trace."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": platform.node(), "machine": platform.machine(), "cpu": cpu, "python": platform.python_version()}


def save_trace(trace_dir: Path, destination: Path, meta: dict[str, Any]) -> Path:
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise UsageError("exists; give --save a new folder", destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        shutil.copytree(trace_dir, staging / "trace")
        (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(staging, 0o777 & ~_umask())
        if destination.exists():
            destination.rmdir()
        os.rename(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def trace_card(
    card_path: str | Path,
    *,
    mode: str | None = None,
    extra_args: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    save: str | Path | None = None,
    against: str | Path | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> TraceResult:
    """Run CARD once with tracing on; summarise it; save it or compare it with a saved one."""
    card = load_card(card_path)
    saved_meta: dict[str, Any] | None = None
    saved_trace: RunTrace | None = None
    if against is not None:
        saved_meta, saved_trace = read_saved(against)
        mode = mode or saved_meta.get("mode", "rng")
    mode = mode or "rng"
    if mode not in MODES:
        raise UsageError(f"unknown trace mode {mode!r} (one of {', '.join(MODES)})")
    if save is not None and Path(save).exists() and (not Path(save).is_dir() or any(Path(save).iterdir())):
        raise UsageError("exists; give --save a new folder", save)
    base, _ = prepare_workdir(card, workdir, 1, "trace")  # kept: the trace is what this command is for
    spec = make_specs(card, 1, base, extra_args, env_hooks=(trace_hook(mode),))[0]
    trace_dir = run_trace_dir(spec.workdir)
    with interrupts_as_exceptions():
        state = run_batch([spec], on_update=on_update)[0]
    result = TraceResult("ok" if state.ok else "run-failed", mode, state, trace_dir)
    if not state.ok:
        return result
    run = read_trace(trace_dir)
    result.trace = run
    result.unseeded = unseeded_uses(run)
    result.collisions = seed_collisions(run)
    if saved_trace is not None:
        result.against = Path(against)  # type: ignore[arg-type]
        result.comparison = compare_traces(saved_trace, run, labels=(f"saved {against}", "this run"))
    if save is not None:
        meta = {"schema": SAVED_SCHEMA, "card": card.name, "mode": mode, "command": spec.argv, "machine": machine()}
        result.saved = save_trace(trace_dir, Path(save), meta)
    return result
