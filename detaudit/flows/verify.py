"""``detaudit verify``: the CI gate. One run (or an existing JSONL) against a standard.

Fail closed: PASSED only when a standard recorded on this runner class, with at least one
series, matches every one of its series. A standard for another runner class is
NOT VERIFIED (exit 1) unless the caller allows other runners (then SKIPPED).
"""

from __future__ import annotations

import glob
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from detaudit.data.card import Card, load_card, standard_path
from detaudit.run.cluster import runner_mismatch
from detaudit.data.compare import PairDivergence, SeriesData, compare_series
from detaudit.errors import InputError, UsageError
from detaudit.data.exclusion import Exclusion
from detaudit.standards.formats import align_run_series, load_any
from detaudit.standards.formats.registry import steps_are_lenient
from detaudit.data.metrics import read_metrics
from detaudit.run.plan import (
    EnvHook,
    Executor,
    environment_for,
    execute,
    exclusion_for,
    finish,
    make_plan,
    missing_metrics,
    no_metrics_error,
    resolve_runner,
    standards_of_card,
)
from detaudit.env.provenance import detect_environment, package_differences, provenance_differences
from detaudit.run.local import RunState, interrupts_as_exceptions
from detaudit.standards.standard import Standard
from detaudit.data.approximate import approximate_rule, compare_within
from detaudit.trace import run_trace_dir, trace_hook
from detaudit.trace.compare import RunsTraceReport, audit_runs
from detaudit.trace.saved import read_saved, standard_trace_dir


@dataclass
class VerifyResult:
    """``status``: passed; failed; run-failed; empty-standard (it has no series, so proves
    nothing); not-verified (the standard is for another runner class); skipped (the same,
    with other runners allowed); runner-mismatch (a --cluster run landed on another runner
    class than the probe that chose the standard)."""

    status: str
    standard_path: Path
    standard: Standard | None = None
    failures: list[tuple[str, PairDivergence]] = field(default_factory=list)
    compared: int = 0
    extra_series: list[str] = field(default_factory=list)  # in the run, not in the standard
    runner_here: list[str] | None = None
    runner_standard: list[str] | None = None
    other_classes: list[list[str]] = field(default_factory=list)  # classes that have a standard of the card
    provenance: list[str] = field(default_factory=list)  # how this environment differs (on failure)
    package_changes: list[str] = field(default_factory=list)  # package versions that differ, even on a pass
    run: RunState | None = None
    metrics_path: Path | None = None
    workdir: Path | None = None
    workdir_removed: bool = False
    trace: RunsTraceReport | None = None  # with ``trace``: the run's unseeded draws and collisions
    standard_trace: Path | None = None  # the trace the standard carries, compared with this run's

    approximate: list[tuple[str, str]] = field(default_factory=list)  # (series, tolerance) passed only within tolerance
    approximate_against: str | None = None  # set when checked approximately: the standard's runner class

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped", "approximate")


def verify(
    card_path: str | Path | None = None,
    *,
    metrics: str | Path | None = None,
    standard: str | Path | None = None,
    allow_other_runner: bool = False,
    strict_runner: bool | None = None,
    step_key: str | None = None,
    extra_args: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    executor: Executor | None = None,
    env_hooks: Sequence[EnvHook] = (),
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
    trace: str | None = None,
) -> VerifyResult:
    """Compare one run with a standard; see the module doc for what passes.

    ``strict_runner`` is the older spelling: True is the default behaviour, False the same
    as ``allow_other_runner=True``.
    """
    if strict_runner is not None:
        if strict_runner and allow_other_runner:
            raise UsageError("--strict-runner and --allow-other-runner contradict each other")
        allow_other_runner = not strict_runner
    if card_path is None and metrics is None:
        raise UsageError("give a CARD to run, or --metrics RUN.jsonl")
    if card_path is None and standard is None:
        raise UsageError("--metrics without a CARD needs --standard FILE")
    if trace and metrics is not None:
        raise UsageError("--trace traces a run: give a CARD, not --metrics")
    if cluster is not None and metrics is not None:
        raise UsageError("--cluster runs the card; with --metrics nothing runs")
    card: Card | None = load_card(card_path) if card_path is not None else None
    info: dict[str, Any] | None = None
    here: list[str] | None = None
    if card is not None and cluster is not None and metrics is None:
        from detaudit.run.cluster import ClusterExecutor

        executor = ClusterExecutor(card, card_path, cluster, extra_args)  # type: ignore[arg-type]
        with interrupts_as_exceptions():
            info, here = executor.probe()
    elif card is not None:
        info = environment_for(card)
        here = resolve_runner(card, info)
    # Opt-in, kept apart: this runner class checked approximately against another's standard.
    rule = approximate_rule(card, here) if card is not None and here is not None else None
    if standard is not None:
        path = Path(standard)
    else:
        assert card is not None and here is not None
        path = standard_path(card, here)
        if not path.exists() and rule is not None:
            path = card.standards_path / f"{card.name}.{rule.against}.json"
        if not path.exists():
            others = standards_of_card(card)
            if not others:
                raise InputError(path, f"no standard for card {card.name!r} (record one with `detaudit record {card.path}`)")
            first_path, first = others[0]
            return VerifyResult(
                "skipped" if allow_other_runner else "not-verified", first_path, first, runner_here=here,
                runner_standard=first.runner_class, other_classes=[s.runner_class or [] for _, s in others],
            )
    std = load_any(path)  # any format, detected from the content
    result = VerifyResult("passed", path, std, runner_here=here, runner_standard=std.runner_class)
    approximate = None
    if (rule is not None and std.runner_class is not None and here != std.runner_class
            and "-".join(std.runner_class) == rule.against):
        approximate = rule
        result.approximate_against = rule.against
    elif here is not None and std.runner_class is not None and here != std.runner_class:
        result.status = "skipped" if allow_other_runner else "not-verified"
        result.other_classes = [std.runner_class]
        return result
    if not std.series:
        result.status = "empty-standard"
        return result
    plan = None
    explicit_trace = bool(trace)
    saved_trace = None
    if metrics is None:
        assert card is not None and info is not None
        carried = standard_trace_dir(path)
        if (carried / "meta.json").is_file():  # the standard carries its run's trace: trace this run too
            saved_meta, saved_trace = read_saved(carried)
            result.standard_trace = carried
            trace = "modules" if "modules" in (trace, saved_meta.get("mode")) else "rng"
        if trace:
            env_hooks = tuple(env_hooks) + (trace_hook(trace),)
        with interrupts_as_exceptions():
            plan = make_plan(card, 1, environment=info, workdir=workdir, extra_args=extra_args,
                             env_hooks=env_hooks, label="verify")
            result.workdir = plan.workdir
            state = execute(plan, executor=executor, on_update=on_update)[0]
        result.run = state
        if not state.ok:
            result.status = "run-failed"
            return result
        if here is not None and runner_mismatch([state], here):
            result.status = "runner-mismatch"
            return result
        info = getattr(state, "environment", None) or info
        if missing_metrics(plan):
            raise no_metrics_error(plan, plan.specs[0])
        if trace:
            result.trace = audit_runs([run_trace_dir(plan.specs[0].workdir)], reference=saved_trace,
                                      reference_labels=("the standard's run", "this run"))
        metrics = plan.specs[0].metrics_path
    result.metrics_path = Path(metrics)
    default_step_key = step_key or (card.step_key if card else None)
    # The standard's series are always compared, whatever the exclude patterns say.
    keep = tuple(glob.escape(name) for name in std.series)
    exclusion = exclusion_for(card, include=keep) if card is not None else Exclusion(include=keep)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        run = read_metrics(metrics, default_step_key=default_step_key, exclusion=exclusion)
    lenient = steps_are_lenient(std)
    for name, expected in sorted(std.series.items()):
        actual = SeriesData.from_run(run, run.series[name]) if name in run.series else None
        if actual is not None:
            actual = align_run_series(std, name, actual)
        divergence = compare_series(expected, actual, 1, lenient_steps=lenient)
        tolerance = approximate.tolerance_for(name) if approximate is not None else None
        if divergence is not None and tolerance is not None and actual is not None:
            divergence = compare_within(expected, actual, tolerance)
            if divergence is None:
                result.approximate.append((name, tolerance.describe()))
        if divergence is not None:
            result.failures.append((name, divergence))
    result.compared = len(std.series)
    result.extra_series = sorted(n for n in run.series if n not in std.series and n not in std.dropped)
    if info is not None:  # a run of the card here: its packages against the standard's
        result.package_changes = package_differences(std.runner, info)
    if result.failures:
        result.status = "failed"
        current = info if info is not None else detect_environment()
        result.provenance = provenance_differences(std.runner, current) + package_differences(std.runner, current)
    elif approximate is not None:
        result.status = "approximate"  # never "passed": this class was not held to the exact standard
    if plan is not None:
        # --trace: keep the trace; a trace taken only because the standard carries one goes on a pass
        result.workdir_removed = finish(plan, passed=result.ok and not explicit_trace)
    return result
