"""``detaudit record``: run a card N times, and write a standard only if all runs agree."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

from detaudit import __version__
from detaudit.data.card import load_card, standard_path
from detaudit.data.compare import DiffReport, SeriesData, diff_runs
from detaudit.data.metrics import MetricsRun
from detaudit.data.values import encode_value
from detaudit.env.provenance import git_state, standard_runner
from detaudit.errors import InputError, UsageError
from detaudit.fileio import write_atomic
from detaudit.results import RecordResult, RecordStatus
from detaudit.run.card_runs import place, run_card
from detaudit.run.executor import runner_mismatch
from detaudit.run.local import interrupts_as_exceptions
from detaudit.run.plan import EnvHook, RunPlan, finish, read_run_metrics
from detaudit.run.spec import RunState
from detaudit.runner_class import RunnerClass
from detaudit.standards import compile_cache
from detaudit.standards.diff import diff_standards
from detaudit.standards.formats import FORMATS, load_any, render_as
from detaudit.standards.formats import drop_nan_series as drop_nan
from detaudit.standards.standard import Standard, standard_lock
from detaudit.trace import MODE_ENV, MODES, run_trace_dir
from detaudit.trace.compare import audit_runs
from detaudit.trace.saved import carries_trace, check_replaceable, save_trace, standard_trace_dir, trace_meta


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
    env_hooks: Sequence[EnvHook] = (),
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
    on_start: Callable[[Path, RunnerClass], None] | None = None,
    trace: str | None = None,
) -> RecordResult:
    """Run the card ``runs`` times and write its standard if every compared series agrees.

    ``trace`` ("rng" or "modules"): every run traces its global-RNG draws (and module calls)
    into ``runN/trace/``; the result carries the first draw that differs between runs, and
    the work dir is kept for the traces.

    ``fmt`` None keeps an existing standard's format (else ``detaudit``). With ``write``
    false the runs are compared and nothing is written (no standard path, no lock).
    ``cluster`` (a Ray job server address) runs them as Ray jobs (``detaudit.run.cluster``),
    traced runs included: a probe job gives the runner class, and runs that report another
    class write nothing.

    Fail closed, in this order: ``UsageError`` before running anything when the standard
    exists and ``update`` is false, when its trace folder is in the way (not a saved trace, or
    a symbolic link), or when another record of the same standard holds its lock; after the
    runs, everything that can fail (the file's text in its format, the review of the old
    standard, the trace of run 1 copied next to it) is done before the first byte of the
    standard is written.
    """
    if runs < 2:
        raise UsageError("--runs must be at least 2: a standard needs runs that agree")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r} (one of {', '.join(FORMATS)})")
    if drop_nan_series and fmt != "miles":
        raise UsageError("--drop-nan-series is for --format miles (verifiers that compare with ==)")
    if trace is not None and trace not in MODES:
        raise UsageError(f"unknown trace mode {trace!r} (one of {', '.join(MODES)})")
    card = load_card(card_path)
    placement = place(card, cluster=cluster, parallel=parallel)
    if placement.refusal is not None:  # a standard recorded here would carry a promise this machine breaks
        raise InputError(card.path, f"cannot record card {card.name!r} here: {placement.refusal}")
    runner_class = placement.runner_class
    assert runner_class is not None  # place() probed (its default), and a probe always names the class
    path: Path | None = None
    old: Standard | None = None
    if write:
        path = Path(out) if out is not None else standard_path(card, runner_class)
        if path.exists() and not update:
            raise UsageError("exists; pass --update to replace it", path)
        check_trace_destination(path, traced=bool(trace))  # before any run, and again before writing
        old = load_any(path) if path.exists() else None
    fmt = fmt or (old.format if old is not None else "detaudit")

    def started(plan: RunPlan) -> None:
        if on_start is not None:
            on_start(plan.workdir, runner_class)  # the plan's class: run_card takes it from this placement

    with interrupts_as_exceptions(), (standard_lock(path) if path is not None else nullcontext()):
        if cluster is None:  # each run saves its compile artifacts; run 1's ship with the standard
            env_hooks = (*env_hooks, compile_cache.record_hook())
        plan = run_card(card, runs, placement=placement, parallel=parallel, workdir=workdir, extra_args=extra_args,
                        exclude=exclude, include=include, env_hooks=env_hooks, trace=trace, label="record",
                        on_plan=started, on_update=on_update)
        return _judge(plan, path, old, update=update, allow_partial=allow_partial, fmt=fmt,
                      drop_nan_series=drop_nan_series)


def check_trace_destination(path: Path, *, traced: bool) -> None:
    """``UsageError`` unless writing the standard at ``path`` can also replace (traced) or remove
    (untraced: it would no longer match) whatever trace folder sits next to it. A symbolic link is
    refused either way: the folder it points to is not detaudit's to replace or remove."""
    destination = standard_trace_dir(path)
    if destination.is_symlink():
        raise UsageError("is a symbolic link; a standard's trace folder must be a real folder (remove the link, "
                         "or put the folder it points to in its place)", destination)
    if traced:
        check_replaceable(destination)


def _judge(plan: RunPlan, path: Path | None, old: Standard | None, *, update: bool, allow_partial: bool,
           fmt: str, drop_nan_series: bool = False) -> RecordResult:
    """Compare the finished runs; write the standard to ``path`` (None: write nothing) if they agree."""
    states = plan.states
    if not all(s.ok for s in states):
        return RecordResult(RecordStatus.RUN_FAILED, path, states, plan.workdir)
    if runner_mismatch(states, plan.runner_class):  # cluster runs report where they ran
        return RecordResult(RecordStatus.RUNNER_MISMATCH, path, states, plan.workdir, runner_class=plan.runner_class)
    plan.environment = getattr(states[0], "environment", None) or plan.environment
    parsed = read_run_metrics(plan)
    report = diff_runs(parsed, labels=[f"run{i + 1}" for i in range(len(plan.specs))])
    report.exclude_patterns = plan.exclusion.patterns()
    result = RecordResult(RecordStatus.DISAGREE, path, states, plan.workdir, report=report, runner_class=plan.runner_class)
    traced = any(MODE_ENV in spec.overlay for spec in plan.specs)
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
    # Everything that can fail comes before the first byte of the standard: its text (exact in
    # every format, or an InputError), the review of the standard it replaces, the trace folder
    # (it could have appeared during the runs), and run 1's trace copied in beside it.
    text = render_as(standard, fmt, target=path, previous=old)  # old's byte layout kept
    review = diff_standards(old, standard, old_label=str(path), new_label="new") if old is not None else None
    check_trace_destination(path, traced=traced)
    destination = standard_trace_dir(path)
    staged = _stage_trace(plan, path, destination) if traced else None
    try:
        write_atomic(path, text, overwrite=update)
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged.parent, ignore_errors=True)
        raise
    standard.path = path
    result.status = RecordStatus.WRITTEN
    result.compile_cache = compile_cache.ship(plan.specs[0].workdir, path)
    if staged is not None:
        result.standard_trace = _put_in_place(staged, destination)
    elif carries_trace(path):  # the old standard's trace no longer matches it
        _put_in_place(None, destination)
        result.stale_trace_removed = destination
    result.standard = standard
    result.dropped = standard.dropped
    result.review = review
    result.workdir_removed = finish(plan, passed=not traced)  # traced: keep the traces
    return result


def _stage_trace(plan: RunPlan, path: Path, destination: Path) -> Path:
    """Run 1's trace, saved (``meta.json`` and ``trace/``) in a hidden folder beside ``destination``;
    ``InputError`` when run 1 left no trace (nothing written then)."""
    spec = plan.specs[0]
    trace_dir = run_trace_dir(spec.workdir)
    if not trace_dir.is_dir():
        raise InputError(trace_dir, "run 1 was traced but left no trace here; no standard written")
    environment = plan.environment if isinstance(plan.environment, dict) else {}
    meta = trace_meta(plan.card.name, spec.overlay.get(MODE_ENV, "rng"), spec.argv,
                      packages=environment.get("packages"), standard=path.name)
    destination.parent.mkdir(parents=True, exist_ok=True)
    holder = Path(tempfile.mkdtemp(prefix=f".{destination.name}.new.", dir=destination.parent))
    try:
        return save_trace(trace_dir, holder / "trace", meta)
    except BaseException:
        shutil.rmtree(holder, ignore_errors=True)
        raise


def _put_in_place(staged: Path | None, destination: Path) -> Path:
    """Retire the saved trace at ``destination`` (if any) and rename ``staged`` (if any) there:
    renames only, so the folder is never half old and half new."""
    retired = Path(tempfile.mkdtemp(prefix=f".{destination.name}.old.", dir=destination.parent))
    try:
        if destination.exists():
            os.rename(destination, retired / "trace")
        if staged is not None:
            os.rename(staged, destination)
    finally:
        shutil.rmtree(retired, ignore_errors=True)
        if staged is not None:
            shutil.rmtree(staged.parent, ignore_errors=True)
    return destination


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
    # A recorded plan was probed (record() places with a probe), so it names its runner class.
    assert plan.runner_class is not None
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
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
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
