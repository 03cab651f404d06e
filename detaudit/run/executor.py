"""Where a card's runs go: the ``Executor`` protocol, its local implementation, and the one place
that chooses between local process groups and Ray jobs on a cluster (``choose_executor``).

An executor does two things for ``detaudit.run.card_runs.run_card``:

* ``probe(card, parallel)``: the environment and the runner class a run of the card would see
  there, before any run (record and verify pick the standard with it);
* ``run(specs, ...)``: run the specs and return their final states. Each run's metrics (and
  the folders its spec names in ``collect``) are in its local run dir afterwards, wherever it
  ran.

The cluster executor lives in ``detaudit.run.cluster`` and is imported only when a cluster is
named: nothing else needs Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from detaudit.data.card import Card
from detaudit.run.local import gpu_slots, run_batch
from detaudit.run.plan import environment_for, resolve_runner
from detaudit.run.spec import RunSpec, RunState
from detaudit.runner_class import RunnerClass


class Executor(Protocol):
    """Runs a card's specs somewhere: here, or as Ray jobs on a cluster."""

    def probe(self, card: Card, parallel: int) -> tuple[dict[str, Any], RunnerClass]: ...

    def run(
        self,
        specs: Sequence[RunSpec],
        *,
        parallel: int,
        gpus_per_run: int,
        on_update: Callable[[list[RunState]], None] | None,
    ) -> list[RunState]: ...


class LocalExecutor:
    """Each run a local process in its own process group (``detaudit.run.local.run_batch``)."""

    def probe(self, card: Card, parallel: int) -> tuple[dict[str, Any], RunnerClass]:
        info = environment_for(card, parallel)
        return info, resolve_runner(card, info)

    def run(
        self,
        specs: Sequence[RunSpec],
        *,
        parallel: int = 1,
        gpus_per_run: int = 0,
        on_update: Callable[[list[RunState]], None] | None = None,
    ) -> list[RunState]:
        slots = gpu_slots(gpus_per_run, parallel)
        return run_batch(specs, parallel=parallel, gpu_sets=slots, on_update=on_update)


def choose_executor(card: Card, cluster: str | None = None) -> Executor:
    """Local process groups, or Ray jobs on ``cluster`` (a job server address): the one place
    that chooses. Connecting to the cluster happens here, so a cluster that cannot be reached or
    refuses the request is an ``InputError`` before anything is planned or written."""
    if cluster is None:
        return LocalExecutor()
    from detaudit.run.cluster import ClusterExecutor

    return ClusterExecutor(card, cluster)


def runner_mismatch(states: Sequence[RunState], expected: RunnerClass | None) -> list[RunState]:
    """Runs that report a runner class other than ``expected`` (local runs report none)."""
    return [s for s in states if getattr(s, "runner_class", None) not in (None, expected)]
