"""From a card to metrics: the run plan that ``record``, ``verify`` and ``trace`` share.

    card -> RunPlan (runner class, work dir, one RunSpec per run, exclusion)
         -> an executor runs the specs (``detaudit.run.executor``: local process groups, or Ray
            jobs on a cluster; ``detaudit.run.card_runs.run_card`` chooses and runs)
         -> every run's metrics, read and checked to exist

Each run starts in the card's folder (``Card.run_cwd``); its outputs (metrics, log, trace) go
to its own run dir, ``<work dir>/runN``, which the run also finds in ``$DETAUDIT_WORKDIR``.

``env_hooks``: callables that get each RunSpec and return extra environment variables for that
run; ``PYTHONPATH`` values are prepended to the run's PYTHONPATH, not replaced (a trace
bootstrap goes there). What a hook returns is part of the run's ``overlay``, so it reaches a run
on another machine too.

Run dirs are fresh: a plan refuses a work dir whose run dirs are not empty, so a run can
never be judged by an earlier run's metrics. A work dir detaudit created itself is a
temporary one; ``finish`` removes it when every run passed and keeps it otherwise.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.card import (
    DEFAULT_METRICS_ENV,
    Card,
    command_python,
    probe_env,
    run_argv,
    run_env,
)
from detaudit.data.exclusion import Exclusion, exclusion_for
from detaudit.data.metrics import MetricsRun, read_metrics_many
from detaudit.env.provenance import card_runner_class, detect_environment
from detaudit.errors import InputError, UsageError
from detaudit.run.local import gpu_slots
from detaudit.run.spec import RunSpec, RunState
from detaudit.runner_class import RunnerClass

EnvHook = Callable[[RunSpec], dict[str, str]]
# Where Ray's clients look for a cluster to join. A local run must not join whatever cluster the
# machine's environment names (someone else's, or one that refuses ``num_cpus``): only a card
# that names one in its ``env`` gets it.
CLUSTER_ADDRESS_ENV = "RAY_ADDRESS"


def environment_for(card: Card, parallel: int = 1) -> dict[str, Any]:
    """The environment as one run of ``card`` sees it: probed in the Python its command starts
    (``command_python``; a card that starts none it can name is refused), with the card's
    environment and the GPU set the first run would get."""
    slots = gpu_slots(card.gpus_per_run, parallel)
    env = probe_env(card, slots[0] if slots else None)
    return detect_environment(python=command_python(card, env), env=env)


def resolve_runner(card: Card, info: dict[str, Any]) -> RunnerClass:
    """The card's runner class if it names one, else the one detected here."""
    return card_runner_class(card, info)


def prepend_pythonpath(env: dict[str, str], paths: Sequence[str]) -> None:
    """Put ``paths`` first on ``env``'s PYTHONPATH, keeping what was there."""
    parts = [str(p) for p in paths]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)


def _apply_hooks(spec: RunSpec, hooks: Sequence[EnvHook]) -> None:
    for hook in hooks:
        extra = dict(hook(spec))
        pythonpath = extra.pop("PYTHONPATH", None)
        spec.env.update(extra)
        spec.overlay.update(extra)
        if pythonpath:
            prepend_pythonpath(spec.env, pythonpath.split(os.pathsep))
            prepend_pythonpath(spec.overlay, pythonpath.split(os.pathsep))


def make_specs(
    card: Card,
    count: int,
    workdir: Path,
    extra_args: Sequence[str] = (),
    env_hooks: Sequence[EnvHook] = (),
    collect: Sequence[str] = (),
) -> list[RunSpec]:
    """One RunSpec per run: ``workdir/runN`` as cwd, its log and its metrics path.

    ``collect``: folders under each run dir that a run elsewhere sends back (``trace``).
    """
    specs = []
    for i in range(count):
        run_dir = workdir / f"run{i + 1}"
        metrics = run_dir / "metrics.jsonl"
        env = run_env(card, run_dir, metrics, i)
        if CLUSTER_ADDRESS_ENV not in card.env:
            env.pop(CLUSTER_ADDRESS_ENV, None)
        spec = RunSpec(
            index=i,
            argv=run_argv(card, run_dir, metrics, tuple(extra_args)),
            env=env,
            workdir=run_dir,
            log_path=run_dir / "run.log",
            metrics_path=metrics,
            timeout_s=card.timeout_s,
            cwd=card.run_cwd,
            overlay=run_env(card, run_dir, metrics, i, base={}),  # what the run sets, on any machine
            collect=tuple(collect),
        )
        _apply_hooks(spec, env_hooks)
        specs.append(spec)
    return specs


@dataclass
class RunPlan:
    """What will run: the card, the runner class, the runs' specs, and where they live."""

    card: Card
    runner_class: RunnerClass | None  # None: not probed (``detaudit trace`` needs none)
    environment: dict[str, Any]
    workdir: Path
    specs: list[RunSpec]
    exclusion: Exclusion
    temporary: bool  # detaudit made ``workdir`` (removed when every run passed)
    extra_args: tuple[str, ...] = ()
    states: list[RunState] = field(default_factory=list)


def prepare_workdir(card: Card, workdir: str | Path | None, count: int, label: str) -> tuple[Path, bool]:
    """The base dir of the runs, and whether detaudit created it.

    A given ``workdir`` may exist, but its run dirs (``run1``..``runN``) must be absent or
    empty: metrics left there by an earlier run must never count for this one.
    """
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix=f"detaudit-{label}-{card.name}-")), True
    base = Path(workdir).absolute()  # runs start in the card's folder: their paths must not be relative
    if base.exists() and not base.is_dir():
        raise UsageError("--workdir is not a directory", base)
    for i in range(count):
        run_dir = base / f"run{i + 1}"
        try:
            used = run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir()))
        except OSError as exc:
            raise InputError(run_dir, f"cannot read run dir: {exc.strerror or exc}") from None
        if used:
            raise UsageError(
                f"run dir {run_dir} is not empty (an earlier run's files?); give an empty --workdir or remove it",
                base,
            )
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(base, f"cannot create --workdir: {exc.strerror or exc}") from None
    return base, False


def make_plan(
    card: Card,
    count: int,
    *,
    environment: dict[str, Any],
    runner_class: RunnerClass | None,
    workdir: str | Path | None = None,
    extra_args: Sequence[str] = (),
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    env_hooks: Sequence[EnvHook] = (),
    collect: Sequence[str] = (),
    label: str = "run",
) -> RunPlan:
    """The plan for ``count`` runs of ``card`` (creates the work dir; starts nothing)."""
    exclusion = exclusion_for(card, exclude, include)
    base, temporary = prepare_workdir(card, workdir, count, label)
    return RunPlan(
        card=card,
        runner_class=runner_class,
        environment=environment,
        workdir=base,
        specs=make_specs(card, count, base, extra_args, env_hooks, collect),
        exclusion=exclusion,
        temporary=temporary,
        extra_args=tuple(extra_args),
    )


def missing_metrics(plan: RunPlan) -> list[RunSpec]:
    """Specs of runs that finished without writing their metrics file."""
    return [spec for spec in plan.specs if not spec.metrics_path.is_file()]


def no_metrics_error(plan: RunPlan, spec: RunSpec) -> InputError:
    """The error for a run that exited 0 but wrote no metrics, with the variables it was given."""
    names = sorted({DEFAULT_METRICS_ENV, plan.card.metrics_env})
    return InputError(
        spec.metrics_path,
        f"run {spec.index + 1} exited 0 but wrote no metrics here; the recipe must write its metrics JSONL to "
        f"the path in ${' / $'.join(names)} (set `metrics_env` in {plan.card.path} if it reads another variable; "
        f"log {spec.log_path})",
    )


def read_run_metrics(
    plan: RunPlan,
    *,
    step_key: str | None = None,
    exclusion: Exclusion | None = None,
) -> list[MetricsRun]:
    """Every run's metrics; ``InputError`` (with a hint) if a run wrote none."""
    missing = missing_metrics(plan)
    if missing:
        raise no_metrics_error(plan, missing[0])
    return read_metrics_many(
        [s.metrics_path for s in plan.specs],
        default_step_key=step_key or plan.card.step_key,
        exclusion=exclusion or plan.exclusion,
    )


def finish(plan: RunPlan, passed: bool) -> bool:
    """Remove a temporary work dir when every run passed; keep it (for its logs) otherwise.

    Returns True when the work dir was removed. A work dir the user named is never removed.
    """
    if plan.temporary and passed:
        shutil.rmtree(plan.workdir, ignore_errors=True)
        return True
    return False
