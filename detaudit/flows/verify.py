"""``detaudit verify``: the CI gate. One run (or an existing JSONL) against a standard.

Fail closed: PASSED only when a standard recorded on this runner class, with at least one
series, matches every one of its series. A standard for another runner class is
NOT VERIFIED (exit 1) unless the caller allows other runners (then SKIPPED).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit.errors import InputError, UsageError
from detaudit.flows.results import VerifyResult, VerifyStatus
from detaudit.standards.check import check_run, compared_series
from detaudit.standards.formats import load_any

if TYPE_CHECKING:
    from detaudit.data.approximate import ApproximateRule
    from detaudit.data.card import Card
    from detaudit.fileio import OutputPaths
    from detaudit.run.card_runs import Placement
    from detaudit.run.plan import EnvHook, RunPlan
    from detaudit.run.spec import RunState
    from detaudit.runner_class import RunnerClass

# Deferred: what only a run of a card needs (the card parser, placement and runs, the standard
# store, compile caches, traces) and the environment's provenance (a failure's report) are imported
# where used, so that `verify --metrics FILE --standard STD` (most calls in CI) does not pay ~40 ms of imports.


def verify(
    card_path: Card | str | Path | None = None,
    *,
    metrics: str | Path | None = None,
    standard: str | Path | None = None,
    allow_other_runner: bool = False,
    strict_runner: bool | None = None,
    step_key: str | None = None,
    extra_args: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    env_hooks: Sequence[EnvHook] = (),
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
    trace: str | None = None,
    exclude: tuple[str, ...] = (),
    include: tuple[str, ...] = (),
    runner_class: RunnerClass | None = None,
    paths: OutputPaths | None = None,
) -> VerifyResult:
    """Compare one run with a standard; see the module doc for what passes.

    ``runner_class``: the class the ``metrics`` run ran on, checked against the standard's as a
    card's run is (another class: NOT VERIFIED, or SKIPPED with ``allow_other_runner``). With
    ``metrics``, no card and no ``runner_class``, nothing says where the run ran: the result says
    the class was not checked (``runner_unchecked``).

    ``card_path``: the card's file, or the card as parsed. ``paths``: the command's inputs and
    outputs (its reports); the standard found for the card joins the inputs, checked before the run.

    ``exclude`` / ``include``: globs over the standard's series; a series ``exclude`` names is left
    out (and reported) unless ``include`` names it too.

    ``strict_runner`` is the older spelling: True is the default behaviour, False the same
    as ``allow_other_runner=True``. ``cluster``: the run is a Ray job there; a standard that
    carries a trace gets the cluster run traced too (its trace comes back with its metrics).
    The result names the standard's trace (``standard_trace``) only when this run's trace was
    taken and compared with it.
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
    if extra_args and metrics is not None:
        raise UsageError("with --metrics nothing runs: the arguments after -- would be dropped (give them to a run "
                         "of the CARD, without --metrics)")
    if runner_class is not None and (metrics is None or card_path is not None):
        raise UsageError("--runner-class names where a --metrics run ran; with a CARD the class is detected")
    if trace is not None:
        from detaudit.trace import MODES

        if trace not in MODES:
            raise UsageError(f"unknown trace mode {trace!r} (one of {', '.join(MODES)})")
    card: Card | None = None
    info: dict[str, Any] | None = None
    here = runner_class
    placement: Placement | None = None
    rule: ApproximateRule | None = None
    if card_path is not None:
        card, placement, rule = _place(card_path, cluster)
        info, here = placement.environment, placement.runner_class
        if placement.refusal is not None:  # before any run: nothing could be proven
            return _refused(card, placement, standard)
    if standard is not None:
        path = Path(standard)
    else:
        assert card is not None and placement is not None
        found = _card_standard(card, placement, rule, allow_other_runner, paths)
        if isinstance(found, VerifyResult):  # only other classes' standards: nothing runs
            return found
        path = found
    if paths is not None:  # no report may be written over the standard this verify reads
        paths.reads(path, "the standard it checks")
        paths.check()
    std = load_any(path)  # any format, detected from the content
    result = VerifyResult(VerifyStatus.PASSED, path, std, runner_here=here, runner_standard=std.runner_class, card=card)
    if here is None and std.runner_class is not None:
        result.runner_unchecked = (f"the standard is for runner class {std.runner_class}; where this run ran is not "
                                   "known (give its CARD, or --runner-class CLASS)")
    elif std.runner_class is None:  # a standard recorded from files without --runner-class, or another framework's
        result.runner_unchecked = ("the standard names no runner class, so where it holds is not known (record it "
                                   "from a CARD, or with --runner-class CLASS)")
    approximate = None
    if (rule is not None and std.runner_class is not None and here != std.runner_class
            and "-".join(std.runner_class) == rule.against):
        approximate = rule
        result.approximate_against = rule.against
    elif here is not None and std.runner_class is not None and here != std.runner_class:
        result.status = VerifyStatus.SKIPPED if allow_other_runner else VerifyStatus.NOT_VERIFIED
        result.other_classes = [std.runner_class]
        return result
    if not std.series:
        result.status = VerifyStatus.EMPTY_STANDARD
        return result
    compared_series(std, tuple(exclude), tuple(include), card)  # bad selection or nothing to compare: before any run
    plan = None
    explicit_trace = bool(trace)
    if metrics is None:
        assert card is not None and placement is not None
        plan = _run_once(card, placement, path, result, workdir=workdir, extra_args=extra_args, env_hooks=env_hooks,
                         cluster=cluster, trace=trace, on_update=on_update)
        if result.status in (VerifyStatus.RUN_FAILED, VerifyStatus.RUNNER_MISMATCH):
            return result
        info = getattr(plan.states[0], "environment", None) or info
        metrics = plan.specs[0].metrics_path
    result.metrics_path = Path(metrics)
    check = check_run(std, Path(metrics), card=card, step_key=step_key, approximate=approximate,
                      exclude=tuple(exclude), include=tuple(include))
    result.failures, result.approximate = check.failures, check.approximate
    result.compared, result.extra_series = check.compared, check.extra_series
    result.left_out, result.renamed = check.left_out, check.renamed
    result.run_metrics = check.run
    if info is not None:  # a run of the card here: its packages against the standard's
        from detaudit.env.provenance import package_differences

        result.package_changes = package_differences(std.runner, info)
    if result.failures:
        result.status = VerifyStatus.FAILED
        if std.runner:  # a golden of another framework records no environment: nothing to compare, no probe
            from detaudit.env.provenance import detect_environment, package_differences, provenance_differences

            current = info if info is not None else detect_environment()
            result.package_changes = package_differences(std.runner, current)
            result.provenance = provenance_differences(std.runner, current) + result.package_changes
    elif result.trace is not None and result.trace.seeds is not None and not result.trace.seeds.ok:
        result.status = VerifyStatus.FAILED  # the bits match, but samples of one step were seeded alike
    elif approximate is not None:
        result.status = VerifyStatus.APPROXIMATE  # never "passed": this class was not held to the exact standard
    if result.package_changes:  # (after the status: which packages can change bits is a note, never a verdict)
        from detaudit.env.imports import card_imports
        from detaudit.env.provenance import bit_packages

        result.bit_packages = bit_packages(result.package_changes, card_imports(card) if card is not None else set())[0]
    if plan is not None:
        from detaudit.run.plan import finish

        # --trace: keep the trace; a trace taken only because the standard carries one goes on a pass
        result.workdir_removed = finish(plan, passed=result.ok and not explicit_trace)
    return result


def _place(card_path: Card | str | Path, cluster: str | None) -> tuple[Card, Placement, ApproximateRule | None]:
    """The card, where it runs (its runner class, its environment), and the opt-in rule that checks
    this class approximately against another's standard."""
    from detaudit.data.approximate import approximate_rule
    from detaudit.data.card import as_card
    from detaudit.run.card_runs import place

    card = as_card(card_path)
    placement = place(card, cluster=cluster)
    here = placement.runner_class
    return card, placement, approximate_rule(card, here) if here is not None else None


def _refused(card: Card, placement: Placement, standard: str | Path | None) -> VerifyResult:
    """PROFILE_REFUSED: the card's placement cannot run it as its profile asks (the reason is the placement's)."""
    from detaudit.standards.store import standard_path

    assert placement.runner_class is not None
    path = Path(standard) if standard is not None else standard_path(card, placement.runner_class)
    return VerifyResult(VerifyStatus.PROFILE_REFUSED, path, None, runner_here=placement.runner_class,
                        refusal=placement.refusal, card=card)


def _card_standard(card: Card, placement: Placement, rule: ApproximateRule | None, allow_other_runner: bool,
                   paths: OutputPaths | None) -> Path | VerifyResult:
    """The standard a card's run is checked against: this class's, or the one ``rule`` names; a
    result instead where only other classes' standards exist."""
    from detaudit.standards.store import approximate_standard_path, standard_path, standards_of_card

    here = placement.runner_class
    assert here is not None
    path = standard_path(card, here)
    if not path.exists() and rule is not None:
        path = approximate_standard_path(card, rule.against)
    if path.exists():
        return path
    others = standards_of_card(card)
    if not others:
        raise InputError(path, f"no standard for card {card.name!r} (record one with `detaudit record {card.path}`)")
    first_path, first = others[0]
    if paths is not None:  # nor over another runner class's standard
        for other_path, _ in others:
            paths.reads(other_path, "a standard of the card")
        paths.check()
    return VerifyResult(
        VerifyStatus.SKIPPED if allow_other_runner else VerifyStatus.NOT_VERIFIED, first_path, first, runner_here=here,
        runner_standard=first.runner_class, other_classes=[c for _, s in others if (c := s.runner_class) is not None],
        card=card,
    )


def _run_once(card: Card, placement: Placement, path: Path, result: VerifyResult, *, workdir: str | Path | None,
              extra_args: tuple[str, ...], env_hooks: Sequence[EnvHook], cluster: str | None, trace: str | None,
              on_update: Callable[[list[RunState]], None] | None) -> RunPlan:
    """One run of the card for ``verify``, traced where asked or where the standard carries a trace,
    loading the compile artifacts the standard ships. Fills ``result`` (its run, workdir, trace; a
    failed run or another runner class as its status)."""
    from detaudit.run.card_runs import run_card
    from detaudit.run.executor import runner_mismatch
    from detaudit.run.plan import missing_metrics, no_metrics_error
    from detaudit.standards import compile_cache
    from detaudit.trace.saved import carries_trace, read_saved, standard_trace_dir

    saved_trace = None
    carried = standard_trace_dir(path)
    if carries_trace(path):  # the standard carries its run's trace (a broken one is refused): trace this run too
        saved_meta, saved_trace = read_saved(carried)
        trace = "modules" if "modules" in (trace, saved_meta.get("mode")) else "rng"
    shipped = compile_cache.verify_hook(path) if cluster is None else None
    if shipped is not None:  # the standard ships its compile artifacts: the run loads what fits it
        env_hooks = (*env_hooks, shipped)
        result.compile_cache = compile_cache.standard_cache_dir(path)
    plan = run_card(card, 1, placement=placement, workdir=workdir, extra_args=extra_args, env_hooks=env_hooks,
                    trace=trace, label="verify", on_update=on_update)
    result.workdir = plan.workdir
    state = result.run = plan.states[0]
    here = placement.runner_class
    if not state.ok:
        result.status = VerifyStatus.RUN_FAILED
    elif here is not None and runner_mismatch([state], here):
        result.status = VerifyStatus.RUNNER_MISMATCH
    elif missing_metrics(plan):
        raise no_metrics_error(plan, plan.specs[0])
    elif trace:
        from detaudit.trace import run_trace_dir
        from detaudit.trace.compare import audit_runs

        info = getattr(state, "environment", None) or placement.environment
        result.trace = audit_runs([run_trace_dir(plan.specs[0].workdir)], reference=saved_trace,
                                  reference_labels=("the standard's run", "this run"),
                                  packages=(info or {}).get("packages"))
        if saved_trace is not None and not result.trace.missing:
            result.standard_trace = carried  # never claimed for a trace this run did not take
    return plan
