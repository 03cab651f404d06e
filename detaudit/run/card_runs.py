"""``run_card``: the one seam through which ``record``, ``verify`` and ``trace`` run a card.

    place(card, cluster)  -> the executor (local or Ray jobs) and, probed there, the environment
                             and runner class a run sees
    run_card(card, N)     -> the plan (work dir, one spec per run, trace variables), executed;
                             returns the plan with its final states

A flow that must decide something from the runner class before any run (which standard,
whether it exists, whether a trace is taken) calls ``place`` first and hands the placement to
``run_card``; otherwise ``run_card`` places the runs itself. A traced run's trace folder is
named in each spec's ``collect``, so a run on a cluster node sends its trace back with its
metrics: every executor leaves the same files in the same local run dirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.data.card import Card
from detaudit.run.executor import Executor, choose_executor
from detaudit.run.local import interrupts_as_exceptions
from detaudit.run.plan import EnvHook, RunPlan, make_plan
from detaudit.run.spec import RunState
from detaudit.runner_class import RunnerClass
from detaudit.trace import TRACE_SUBDIR, trace_hook


@dataclass(frozen=True)
class Placement:
    """Where a card's runs go, and what a run sees there (probed before any run)."""

    executor: Executor
    environment: dict[str, Any]
    runner_class: RunnerClass | None  # None: not probed
    # Why this machine cannot honour the card's portable profile (None: it can, or the card has none):
    # its class would be the profile's, but its bits were never promised to match.
    refusal: str | None = None


def place(card: Card, *, cluster: str | None = None, parallel: int = 1, probe: bool = True) -> Placement:
    """Choose the executor for ``card`` (``cluster``: Ray jobs there) and probe it.

    ``probe`` false skips the probe (no runner class: ``detaudit trace`` needs none).
    """
    executor = choose_executor(card, cluster)
    if not probe:
        return Placement(executor, {}, card.runner)
    with interrupts_as_exceptions():
        info, cls = executor.probe(card, parallel)
    refusal = card.portable.refusal(info) if card.portable is not None else None
    return Placement(executor, info, cls, refusal)


def execute(
    plan: RunPlan,
    executor: Executor,
    *,
    parallel: int = 1,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> list[RunState]:
    """Run every spec of the plan with ``executor``; the plan keeps the final states."""
    plan.states = executor.run(plan.specs, parallel=parallel, gpus_per_run=plan.card.gpus_per_run,
                               on_update=on_update)
    return plan.states


def run_card(
    card: Card,
    count: int,
    *,
    placement: Placement | None = None,
    cluster: str | None = None,
    parallel: int = 1,
    workdir: str | Path | None = None,
    extra_args: Sequence[str] = (),
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    env_hooks: Sequence[EnvHook] = (),
    trace: str | None = None,
    label: str = "run",
    probe: bool = True,
    on_plan: Callable[[RunPlan], None] | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> RunPlan:
    """Run ``card`` ``count`` times where ``placement`` (else ``cluster``, else here) says.

    ``trace`` ("rng" or "modules"): every run traces into ``runN/trace/``, here or on a node.
    ``on_plan`` sees the plan after its work dir exists and before any run starts. Ctrl-C,
    SIGTERM and SIGHUP stop every run and raise ``Interrupted``.
    """
    placement = placement or place(card, cluster=cluster, parallel=parallel, probe=probe)
    hooks = tuple(env_hooks)
    collect: tuple[str, ...] = ()
    if trace:
        hooks += (trace_hook(trace, card=card.name),)  # each ledger names its card
        collect = (TRACE_SUBDIR,)
    with interrupts_as_exceptions():
        plan = make_plan(card, count, environment=placement.environment, runner_class=placement.runner_class,
                         workdir=workdir, extra_args=extra_args, exclude=exclude, include=include, env_hooks=hooks,
                         collect=collect, label=label)
        if on_plan is not None:
            on_plan(plan)
        execute(plan, placement.executor, parallel=parallel, on_update=on_update)
    return plan
