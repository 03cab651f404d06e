"""``detaudit record``: run a card N times, and write a standard only if all runs agree.

``record_metrics`` makes a standard from metrics files of runs already made (``record --metrics``,
the pytest plugin) by the same rules: every file compared exactly, default exclusions, a standard
only when all agree, never over an existing one without ``update``, the same lock and atomic write.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit import __version__
from detaudit.data.compare import DiffReport, diff_runs
from detaudit.data.exclusion import exclusion_for
from detaudit.data.metrics import MetricsRun
from detaudit.env.provenance import git_state, standard_runner
from detaudit.errors import InputError, UsageError
from detaudit.fileio import OutputPaths, replace_folder, write_atomic
from detaudit.flows.results import RecordResult, RecordStatus, runs_trace_failures
from detaudit.standards.diff import diff_standards
from detaudit.standards.formats import FORMAT_NAMES, comparison_of, load_any, render_as
from detaudit.standards.formats import drop_nan_series as drop_nan
from detaudit.standards.from_metrics import agreeing_runs, compare_metrics, standard_of_runs
from detaudit.standards.standard import Standard, standard_lock
from detaudit.standards.store import standard_path, standards_of_card
from detaudit.trace import MODE_ENV, MODES, PERTURB_ENV, run_trace_dir
from detaudit.trace.saved import carries_trace, check_replaceable, save_trace, standard_trace_dir, trace_meta

if TYPE_CHECKING:
    from detaudit.data.card import Card
    from detaudit.run.plan import EnvHook, RunPlan
    from detaudit.run.spec import RunSpec, RunState
    from detaudit.runner_class import RunnerClass

# Deferred: what only runs of a card need (the card parser, placement and runs, compile caches, the
# trace comparison: ~45 ms of imports) is imported by ``record`` and ``_judge``; ``record --metrics``
# (``record_metrics``) does not pay for it.


def record(
    card_path: Card | str | Path,
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
    paths: OutputPaths | None = None,
) -> RecordResult:
    """Run the card ``runs`` times and write its standard if every compared series agrees.

    ``card_path``: the card's file, or the card as parsed. ``paths``: the command's other inputs
    and outputs (its reports); the standard's path joins them and all are checked before any run.

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
    _check_format(fmt, drop_nan_series)
    if trace is not None and trace not in MODES:
        raise UsageError(f"unknown trace mode {trace!r} (one of {', '.join(MODES)})")
    from detaudit.data.card import as_card
    from detaudit.run.card_runs import place, run_card
    from detaudit.run.local import interrupts_as_exceptions
    from detaudit.standards import compile_cache

    card = as_card(card_path)
    placement = place(card, cluster=cluster, parallel=parallel)
    if placement.refusal is not None:  # a standard recorded here would carry a promise this machine breaks
        raise InputError(card.path, f"cannot record card {card.name!r} here: {placement.refusal}")
    runner_class = placement.runner_class
    assert runner_class is not None  # place() probed (its default), and a probe always names the class
    path: Path | None = None
    old: Standard | None = None
    if write:
        path = Path(out) if out is not None else standard_path(card, runner_class)
    if paths is not None:  # the standard among the command's paths, the card's other standards as inputs: checked
        if path is not None:
            paths.writes(path, "the standard (--out)" if out is not None else "the standard", replace_flag="--update",
                         overwrite=update)
        for other, _ in standards_of_card(card):
            if path is None or os.path.realpath(other) != os.path.realpath(path):  # (the one it replaces: its output)
                paths.reads(other, "a standard of the card")
        paths.check()
    if path is not None:
        old = _replaced(path, update)
        check_trace_destination(path, traced=bool(trace))  # before any run, and again before writing
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
        result = _judge(plan, path, old, update=update, allow_partial=allow_partial, fmt=fmt,
                        drop_nan_series=drop_nan_series)
    result.card = card  # reports read the card from the result, never parse it again
    return result


def record_metrics(
    files: Sequence[str | Path],
    *,
    out: str | Path | None,
    update: bool = False,
    allow_partial: bool = False,
    fmt: str | None = None,
    drop_nan_series: bool = False,
    exclude: tuple[str, ...] = (),
    include: tuple[str, ...] = (),
    step_key: str | None = None,
    runner_class: RunnerClass | None = None,
    environment: dict[str, Any] | None = None,
    name: str | None = None,
    write: bool = True,
    recorded: dict[str, Any] | None = None,
    keep_unchanged: bool = False,
    min_runs: int = 2,
    paths: OutputPaths | None = None,
) -> RecordResult:
    """A standard from the metrics files of runs already made, written to ``out`` only if they all agree.

    The rules are ``record``'s: at least two files, compared exactly after the default (and
    ``exclude``/``include``) exclusions; nothing written when they disagree (``allow_partial``: the
    agreeing series) or when no series is left; an existing ``out`` replaced only with ``update``,
    under the standard's lock, atomically. ``runner_class`` (and ``environment``, a probe of the
    machine the runs ran on) go into the standard's ``runner``; without a class the standard names
    none and ``verify`` says the class was not checked. ``recorded`` replaces the default record of
    how it was made. Replacing a sampled golden (Megatron-LM, NeMo-RL, TorchTitan) keeps its format,
    series and steps: the run is taken at the golden's steps. ``keep_unchanged``: an update whose
    series are all identical to the old standard's, on the same class, leaves the file's bytes.
    ``min_runs`` 1 (the pytest plugin's ``--detaudit-runs 1``, asked for by name) takes one file.
    ``paths``: the command's inputs and reports; ``out`` joins them and is checked before anything is read.
    """
    compared = [Path(p) for p in files]
    if len(compared) < max(1, min_runs):
        raise UsageError("a standard needs runs that agree: give at least two metrics files")
    if write and out is None:
        raise UsageError("--metrics makes a standard from files: name it with --out FILE")
    _check_format(fmt, drop_nan_series)
    path = Path(out) if write and out is not None else None
    if paths is not None:  # --out must not be one of the files it is made from, nor a report's path
        paths.writes(path, "the standard (--out)", replace_flag="--update", overwrite=update)
        paths.check()
    old = _replaced(path, update) if path is not None else None
    fmt = fmt or (old.format if old is not None else "detaudit")
    parsed, report = compare_metrics(compared, step_key=step_key, exclusion=exclusion_for(None, exclude, include),
                                     min_runs=min_runs)
    result = RecordResult(RecordStatus.DISAGREE, path, [], None, report=report, runner_class=runner_class,
                          metrics_files=compared, metrics=parsed)
    if not _agreeing(result, report, allow_partial):
        return result
    if path is None:
        result.status = RecordStatus.AGREED
        return result
    git = git_state(compared[0])
    record_of = recorded if recorded is not None else {
        "runs": len(compared), "agreeing": agreeing_runs(report), "commit": git["commit"], "dirty": git["dirty"],
        "metrics": [os.fsencode(p).decode("utf-8", "backslashreplace") for p in compared], "detaudit": __version__,
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
    }
    runner = standard_runner(runner_class, environment or {}) if runner_class is not None else {}
    standard = standard_of_runs(parsed[0], report, fmt, name=name or path.name.split(".")[0], runner=runner,
                                recorded=record_of,
                                meta={"commit": git["commit"], "source": f"{len(files)} agreeing metrics files"})
    if old is not None and comparison_of(old).sample_run is not None and fmt == old.format:
        standard = _sampled_like(old, standard)
    if keep_unchanged and old is not None and _same_content(old, standard):
        result.status, result.unchanged, result.standard = RecordStatus.WRITTEN, True, old
        return result
    with standard_lock(path):
        _write(result, standard, path, old, fmt=fmt, update=update, drop_nan_series=drop_nan_series)
    return result


def _check_format(fmt: str | None, drop_nan_series: bool) -> None:
    if fmt is not None and fmt not in FORMAT_NAMES:
        raise UsageError(f"unknown --format {fmt!r} (one of {', '.join(FORMAT_NAMES)})")
    if drop_nan_series and fmt != "miles":
        raise UsageError("--drop-nan-series is for --format miles (verifiers that compare with ==)")


def _replaced(path: Path, update: bool) -> Standard | None:
    """The standard at ``path`` that a record would replace (None: there is none); ``UsageError``
    when there is one and ``update`` is false, before anything runs."""
    if not path.exists():
        return None
    if not update:
        raise UsageError("exists; pass --update to replace it", path)
    return load_any(path)


def _agreeing(result: RecordResult, report: DiffReport, allow_partial: bool) -> bool:
    """Whether the compared runs can make a standard; sets the result's status when they cannot."""
    if not report.ok and not allow_partial:
        result.status = RecordStatus.DISAGREE
        return False
    if not report.identical:
        result.status = RecordStatus.EMPTY  # a standard of 0 series would pass any run
        return False
    return True


def _sampled_like(old: Standard, new: Standard) -> Standard:
    """``new``'s series taken at the steps of ``old``, a sampled golden, in its format with its headers;
    series the golden lacks are not added (which to sample is its owners' choice)."""
    sample_run = comparison_of(old).sample_run
    assert sample_run is not None
    kept = {n: sample_run(old.series[n], old.native_series(n), new.series[n]) for n in old.series if n in new.series}
    return dataclasses.replace(old, series=kept, path=None)


def _same_content(old: Standard, new: Standard) -> bool:
    """Every series identical, none added or removed, and the same runner class."""
    if old.runner_class != new.runner_class or old.format != new.format:
        return False
    review = diff_standards(old, new, old_label="old", new_label="new")
    return all(change.status == "identical" for change in review.series)


def _require_traces(specs: Sequence[RunSpec], *, written_word: str) -> None:
    """``InputError`` naming the first traced run that left no trace folder (nothing is written)."""
    for spec in specs:
        if not run_trace_dir(spec.workdir).is_dir():
            raise InputError(run_trace_dir(spec.workdir),
                             f"run {spec.index + 1} was traced but left no trace here; {written_word}")


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
    from detaudit.run.executor import runner_mismatch
    from detaudit.run.plan import finish, read_run_metrics

    states = plan.states
    if not all(s.ok for s in states):
        return RecordResult(RecordStatus.RUN_FAILED, path, states, plan.workdir)
    if runner_mismatch(states, plan.runner_class):  # cluster runs report where they ran
        return RecordResult(RecordStatus.RUNNER_MISMATCH, path, states, plan.workdir, runner_class=plan.runner_class)
    plan.environment = getattr(states[0], "environment", None) or plan.environment
    parsed = read_run_metrics(plan)
    report = diff_runs(parsed, labels=[f"run{i + 1}" for i in range(len(plan.specs))])
    report.exclude_patterns = plan.exclusion.patterns()
    result = RecordResult(RecordStatus.DISAGREE, path, states, plan.workdir, report=report, runner_class=plan.runner_class,
                          metrics=parsed)
    traced = any(MODE_ENV in spec.overlay for spec in plan.specs)
    if traced:
        from detaudit.trace.compare import audit_runs

        result.trace = audit_runs([run_trace_dir(spec.workdir) for spec in plan.specs])
    if not _agreeing(result, report, allow_partial):
        return result
    # Fail closed: equal metrics from runs whose draws differ, or that the trace cannot prove alike, make
    # no standard. --allow-partial with dropped series already accepts runs that differ: the trace only reports.
    if result.trace is not None and (report.ok or not allow_partial):
        _require_traces(plan.specs, written_word="no standard written" if path is not None else "nothing written")
        result.trace_failures = runs_trace_failures(result.trace)
        if result.trace_failures:
            result.status = RecordStatus.TRACE_NOT_OK
            return result
    if path is None:
        result.status = RecordStatus.AGREED
        result.workdir_removed = finish(plan, passed=not traced)  # traced: keep the traces
        return result
    standard = build_standard(plan, parsed[0], report, fmt)
    _write(result, standard, path, old, fmt=fmt, update=update, drop_nan_series=drop_nan_series,
           traced_plan=plan if traced else None, plan=plan)
    result.workdir_removed = finish(plan, passed=not traced)  # traced: keep the traces
    return result


def _write(result: RecordResult, standard: Standard, path: Path, old: Standard | None, *, fmt: str, update: bool,
           drop_nan_series: bool, traced_plan: RunPlan | None = None, plan: RunPlan | None = None) -> None:
    """Write ``standard`` at ``path`` (replacing ``old``) and fill ``result`` in.

    Everything that can fail comes before the first byte of the standard: its text (exact in
    every format, or an InputError), the review of the standard it replaces, the trace folder
    (it could have appeared during the runs), and run 1's trace copied in beside it.
    """
    result.nan_dropped = drop_nan(standard) if drop_nan_series else []
    text = render_as(standard, fmt, target=path, previous=old)  # old's byte layout kept
    review = diff_standards(old, standard, old_label=str(path), new_label="new") if old is not None else None
    check_trace_destination(path, traced=traced_plan is not None)
    destination = standard_trace_dir(path)
    staged = _stage_trace(traced_plan, path, destination) if traced_plan is not None else None
    try:
        write_atomic(path, text, overwrite=update)
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged.parent, ignore_errors=True)
        raise
    standard.path = path
    result.status = RecordStatus.WRITTEN
    if plan is not None:  # runs made here: run 1's compile artifacts ship beside the standard
        from detaudit.standards import compile_cache

        result.compile_cache = compile_cache.ship(plan.specs[0].workdir, path)
    if staged is not None:
        result.standard_trace = _put_in_place(staged, destination)
    elif carries_trace(path):  # the old standard's trace no longer matches it
        _put_in_place(None, destination)
        result.stale_trace_removed = destination
    result.standard = standard
    result.dropped = standard.dropped
    result.review = review


def _stage_trace(plan: RunPlan, path: Path, destination: Path) -> Path:
    """Run 1's trace, saved (``meta.json`` and ``trace/``) in a hidden folder beside ``destination``;
    ``InputError`` when run 1 left no trace (nothing written then)."""
    spec = plan.specs[0]
    _require_traces(plan.specs[:1], written_word="no standard written")  # --allow-partial comes here unchecked
    trace_dir = run_trace_dir(spec.workdir)
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
    """Replace the saved trace at ``destination`` (if any) with ``staged`` (if any), then remove
    the hidden folder ``staged`` was made in."""
    try:
        replace_folder(staged, destination)
    finally:
        if staged is not None:
            shutil.rmtree(staged.parent, ignore_errors=True)
    return destination


def build_standard(plan: RunPlan, first: MetricsRun, report: DiffReport, fmt: str) -> Standard:
    """The standard from the first run's agreeing series (all of them unless partial)."""
    card = plan.card
    git = git_state(card.path)
    command = list(card.command) + list(plan.extra_args)
    # --perturb-schedule: the runs agreed under completion orders detaudit varied (trace/perturb.py)
    schedule = {"schedule": "perturbed"} if any(PERTURB_ENV in spec.overlay for spec in plan.specs) else {}
    # A recorded plan was probed (record() places with a probe), so it names its runner class.
    assert plan.runner_class is not None
    recorded = {
        "runs": len(report.runs),
        "agreeing": agreeing_runs(report),
        "commit": git["commit"],
        "dirty": git["dirty"],
        "card": str(card.path),
        "command": command,
        "detaudit": __version__,
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        **schedule,
    }
    source = f"detaudit record {card.path} ({len(report.runs)} agreeing runs)"
    standard = standard_of_runs(first, report, fmt, name=card.name,
                                runner=standard_runner(plan.runner_class, plan.environment), recorded=recorded,
                                meta={"commit": git["commit"], "source": source})
    if standard.format == "miles":  # miles' shape has no `recorded`: the schedule goes into its meta
        standard.meta.update(schedule)
    return standard
