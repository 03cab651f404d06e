"""``detaudit record``: run a card N times, and write a standard only if all runs agree."""

from __future__ import annotations

import datetime as _dt
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

from detaudit import __version__
from detaudit.data.card import load_card, standard_path
from detaudit.data.compare import DiffReport, SeriesData, diff_runs
from detaudit.data.metrics import MetricsRun
from detaudit.data.values import encode_value
from detaudit.env.provenance import git_state, standard_runner
from detaudit.errors import UsageError
from detaudit.results import RecordResult, RecordStatus
from detaudit.run.cluster import runner_mismatch
from detaudit.run.local import interrupts_as_exceptions
from detaudit.run.plan import (
    EnvHook,
    Executor,
    RunPlan,
    environment_for,
    execute,
    finish,
    make_plan,
    read_run_metrics,
    resolve_runner,
)
from detaudit.run.spec import RunState
from detaudit.standards.diff import diff_standards
from detaudit.standards.formats import FORMATS, load_any, render_as
from detaudit.standards.formats import drop_nan_series as drop_nan
from detaudit.fileio import write_atomic
from detaudit.standards.standard import Standard, standard_lock
from detaudit.trace import MODE_ENV, run_trace_dir, trace_hook
from detaudit.trace.compare import audit_runs
from detaudit.trace.saved import (
    check_replaceable,
    replace_saved_trace,
    standard_trace_dir,
    trace_meta,
)


def record(
    card_path: str | Path,
    *,
    runs: int = 3,
    parallel: int = 1,
    out: str | Path | None = None,
    update: bool = False,
    allow_partial: bool = False,
    fmt: str | None = None,
    drop_nan_series: bool = False,
    extra_args: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    include: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    write: bool = True,
    executor: Executor | None = None,
    env_hooks: Sequence[EnvHook] = (),
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
    on_start: Callable[[Path, list[str]], None] | None = None,
    trace: str | None = None,
) -> RecordResult:
    """Run the card ``runs`` times and write its standard if every compared series agrees.

    ``trace`` ("rng" or "modules"): every run traces its global-RNG draws (and module calls)
    into ``runN/trace/``; the result carries the first draw that differs between runs, and
    the work dir is kept for the traces.

    ``fmt`` None keeps an existing standard's format (else ``detaudit``). With ``write``
    false the runs are compared and nothing is written (no standard path, no lock).
    ``cluster`` (a Ray job server address) runs them as Ray jobs (``detaudit.run.cluster``): a
    probe job gives the runner class, and runs that report another class write nothing.
    Raises ``UsageError`` before running anything when the standard exists and ``update``
    is false, when a traced record's trace folder is taken by something else, or when another
    record of the same standard holds its lock.
    """
    if runs < 2:
        raise UsageError("--runs must be at least 2: a standard needs runs that agree")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r} (one of {', '.join(FORMATS)})")
    if drop_nan_series and fmt != "miles":
        raise UsageError("--drop-nan-series is for --format miles (verifiers that compare with ==)")
    card = load_card(card_path)
    if cluster is not None:
        from detaudit.run.cluster import ClusterExecutor

        executor = ClusterExecutor(card, card_path, cluster, extra_args)
        with interrupts_as_exceptions():
            info, cls = executor.probe()
    else:
        info = environment_for(card, parallel)
        cls = resolve_runner(card, info)
    if trace:
        env_hooks = tuple(env_hooks) + (trace_hook(trace),)
    path: Path | None = None
    old: Standard | None = None
    if write:
        path = Path(out) if out is not None else standard_path(card, cls)
        if path.exists() and not update:
            raise UsageError("exists; pass --update to replace it", path)
        if trace:
            check_replaceable(standard_trace_dir(path))  # before any run (and again before writing)
        old = load_any(path) if path.exists() else None
    fmt = fmt or (old.format if old is not None else "detaudit")
    with interrupts_as_exceptions(), (standard_lock(path) if path is not None else nullcontext()):
        plan = make_plan(card, runs, environment=info, workdir=workdir, extra_args=extra_args, exclude=exclude,
                         include=include, env_hooks=env_hooks, label="record")
        if on_start:
            on_start(plan.workdir, plan.runner_class)
        states = execute(plan, parallel=parallel, executor=executor, on_update=on_update)
        return _judge(plan, states, path, old, update=update, allow_partial=allow_partial, fmt=fmt,
                      drop_nan_series=drop_nan_series)


def _judge(plan: RunPlan, states: list[RunState], path: Path | None, old: Standard | None, *, update: bool,
           allow_partial: bool, fmt: str, drop_nan_series: bool = False) -> RecordResult:
    """Compare the finished runs; write the standard to ``path`` (None: write nothing) if they agree."""
    if not all(s.ok for s in states):
        return RecordResult(RecordStatus.RUN_FAILED, path, states, plan.workdir)
    if runner_mismatch(states, plan.runner_class):  # cluster runs report where they ran
        return RecordResult(RecordStatus.RUNNER_MISMATCH, path, states, plan.workdir, runner_class=plan.runner_class)
    plan.environment = getattr(states[0], "environment", None) or plan.environment
    parsed = read_run_metrics(plan)
    report = diff_runs(parsed, labels=[f"run{i + 1}" for i in range(len(plan.specs))])
    report.exclude_patterns = plan.exclusion.patterns()
    result = RecordResult(RecordStatus.DISAGREE, path, states, plan.workdir, report=report, runner_class=plan.runner_class)
    traced = any(MODE_ENV in spec.env for spec in plan.specs)
    if traced:
        result.trace = audit_runs([run_trace_dir(spec.workdir) for spec in plan.specs])
    if not report.ok and not allow_partial:
        return result
    if not report.identical:
        result.status = RecordStatus.EMPTY  # a standard of 0 series would pass any run
        return result
    if path is None:
        result.status = RecordStatus.AGREED
        result.workdir_removed = finish(plan, passed=not traced)  # traced: keep the traces
        return result
    standard = build_standard(plan, parsed[0], report, fmt)
    result.nan_dropped = drop_nan(standard) if drop_nan_series else []
    if traced:
        check_replaceable(standard_trace_dir(path))  # it could have appeared during the runs: exit 2, nothing written
    # Exact in every format, or an InputError (exit 2) before anything is written.
    write_atomic(path, render_as(standard, fmt, target=path, previous=old), overwrite=update)  # old's byte layout kept
    standard.path = path
    result.status = RecordStatus.WRITTEN
    _keep_standard_trace(result, plan, path, traced)
    result.standard = standard
    result.dropped = standard.dropped
    if old is not None:
        result.review = diff_standards(old, standard, old_label=str(path), new_label="new")
    result.workdir_removed = finish(plan, passed=not traced)  # traced: keep the traces
    return result


def _keep_standard_trace(result: RecordResult, plan: RunPlan, path: Path, traced: bool) -> None:
    """A traced record saves run 1's trace next to the standard (``verify`` compares its run with
    it); an untraced one removes a trace left from the standard it replaced (it no longer matches)."""
    destination = standard_trace_dir(path)
    if traced:
        spec = plan.specs[0]
        meta = trace_meta(plan.card.name, spec.env.get(MODE_ENV, "rng"), spec.argv, standard=path.name)
        result.standard_trace = replace_saved_trace(run_trace_dir(spec.workdir), destination, meta)
    elif (destination / "meta.json").is_file():
        shutil.rmtree(destination)
        result.stale_trace_removed = destination


def build_standard(plan: RunPlan, first: MetricsRun, report: DiffReport, fmt: str) -> Standard:
    """The standard from the first run's agreeing series (all of them unless partial)."""
    card = plan.card
    keep = set(report.identical)
    series = {
        name: SeriesData.from_run(first, s) for name, s in first.series.items() if name in keep
    }
    dropped = {
        m.series: {"kind": m.kind, "step": encode_value(m.step), "disagreeing_runs": [r + 1 for r in m.disagreeing_runs]}
        for m in report.mismatched
    }
    git = git_state(card.path)
    command = list(card.command) + list(plan.extra_args)
    if fmt != "detaudit":  # miles, and the formats converted from its shape (megatron, torchtitan, nemo)
        meta = {"commit": git["commit"], "source": f"detaudit record {card.path} ({len(report.runs)} agreeing runs)"}
        return Standard(series=series, format="miles", meta=meta, name=card.name, dropped=dropped)
    runner = standard_runner(plan.runner_class, plan.environment)
    agreeing = len(report.runs) - len({r for m in report.mismatched for r in m.disagreeing_runs})
    recorded = {
        "runs": len(report.runs),
        "agreeing": agreeing,
        "commit": git["commit"],
        "dirty": git["dirty"],
        "card": str(card.path),
        "command": command,
        "detaudit": __version__,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    excluded = {"patterns": report.exclude_patterns, "series": report.excluded}
    return Standard(
        series=series,
        format="detaudit",
        name=card.name,
        runner=runner,
        recorded=recorded,
        excluded=excluded,
        dropped=dropped,
    )
