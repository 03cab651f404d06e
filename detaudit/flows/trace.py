"""``detaudit trace CARD``: one traced run, its per-process summary, and ``--save`` /
``--against`` to compare traces across machines.

A saved trace is a folder: ``meta.json`` (schema, card, mode, command, machine) and the run's
``trace/*.jsonl``. It is written to a temporary sibling and renamed into place, never over an
existing folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from detaudit.data.card import Card, as_card
from detaudit.errors import UsageError
from detaudit.flows.results import TraceResult, TraceStatus
from detaudit.run.card_runs import place, run_card
from detaudit.run.spec import RunState
from detaudit.trace import MODES, PARITY_ENV, run_trace_dir
from detaudit.trace.compare import (
    compare_traces,
    seed_collisions,
    unseeded_uses,
)
from detaudit.trace.files import RunTrace, read_trace
from detaudit.trace.parity import parity as parity_report
from detaudit.trace.parity_capture import parity_sides
from detaudit.trace.saved import check_save_destination, check_saved_card, read_saved, save_trace, trace_meta
from detaudit.trace.seed_repeats import seed_check


def trace_card(
    card_path: Card | str | Path,
    *,
    mode: str | None = None,
    extra_args: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    save: str | Path | None = None,
    against: str | Path | None = None,
    parity: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> TraceResult:
    """Run CARD once with tracing on; summarise it; save it or compare it with a saved one.

    ``parity`` ("A:B", else the card's ``parity``; modules mode only): compare, within the run,
    the module calls of the processes labelled A and B (``detaudit.trace.parity``)."""
    card = as_card(card_path)
    saved_meta: dict[str, Any] | None = None
    saved_trace: RunTrace | None = None
    if against is not None:
        saved_meta, saved_trace = read_saved(against)
        check_saved_card(saved_meta, card.name, Path(against))  # before the run: traces of one card only
        mode = mode or saved_meta.get("mode", "rng")
    mode = mode or "rng"
    if mode not in MODES:
        raise UsageError(f"unknown trace mode {mode!r} (one of {', '.join(MODES)})")
    if save is not None:
        check_save_destination(Path(save))  # the check save_trace makes, before the run
    sides = None
    if parity is not None:
        sides = parity_sides(parity)
        if sides is None:
            raise UsageError(f"--parity {parity!r}: give two different process labels, A:B (e.g. RolloutEngine:TrainActor)")
        if mode != "modules":
            raise UsageError("--parity compares module calls: trace with --modules")
    elif mode == "modules" and card.parity is not None:
        sides = card.parity
    hooks = [lambda spec: {PARITY_ENV: ":".join(sides)}] if sides is not None else []
    # A trace needs no runner class: probed only to save or compare its package versions (the
    # environment, told apart from the computation). The work dir is kept: the trace is what this command is for.
    placement = place(card, probe=save is not None or against is not None)
    packages = placement.environment.get("packages") if isinstance(placement.environment, dict) else None
    plan = run_card(card, 1, placement=placement, workdir=workdir, extra_args=extra_args, trace=mode, label="trace",
                    env_hooks=hooks, on_update=on_update)
    spec, state = plan.specs[0], plan.states[0]
    trace_dir = run_trace_dir(spec.workdir)
    result = TraceResult(TraceStatus.OK if state.ok else TraceStatus.RUN_FAILED, mode, state, trace_dir)
    if not state.ok:
        return result
    run = read_trace(trace_dir)
    run.packages = packages if isinstance(packages, dict) else None
    result.trace = run
    result.unseeded = unseeded_uses(run)
    result.collisions = seed_collisions(run)
    result.seeds = seed_check(run)
    if sides is not None:
        result.parity = parity_report(run, sides)
    if saved_trace is not None:
        result.against = Path(against)  # type: ignore[arg-type]
        result.comparison = compare_traces(saved_trace, run, labels=(f"saved {against}", "this run"))
    if save is not None:
        result.saved = save_trace(trace_dir, Path(save), trace_meta(card.name, mode, spec.argv, packages=run.packages))
    return result
