"""``record``, ``verify`` (and ``verify --suite``) and ``trace``: the commands that run a card."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.markup import escape

from detaudit.cli.base import EXIT_FAIL, card_or_demo, ci_error_reports, exit_with, handle_errors
from detaudit.cli.options import (
    card_and_extra_args,
    cluster_option,
    exclude_include,
    json_option,
    junit_option,
    perturb_option,
    step_key_option,
    trace_option,
    workdir_option,
)
from detaudit.cli.outputs import Reports, emit_outcome, html_options
from detaudit.render.console import PREFIX, RunDisplay, console
from detaudit.runner_class import RunnerClass
from detaudit.standards.formats.registry import FORMAT_NAMES

if TYPE_CHECKING:
    from detaudit.data.card import Card

# Heavy or rarely used modules are imported inside the commands: nothing here may import torch,
# and `verify --metrics` must start fast.


def _interrupted(err: Any, exc: KeyboardInterrupt, what: str) -> NoReturn:
    """Ctrl-C (or the CI job's cancel): say so, write the CI reports, exit 1."""
    from detaudit.render.runs import print_interrupted

    print_interrupted(err, exc, what)
    ci_error_reports(click.get_current_context(silent=True), f"interrupted: {what}", "INTERRUPTED", "interrupted")
    sys.exit(EXIT_FAIL)


def _warn_est_time(err: Any, card: Any, elapsed: list[float]) -> None:
    """Warn when a run took longer than the card's est_time (suite plans read it)."""
    if card is None or not elapsed:
        return
    from detaudit.flows.suite import over_estimate
    from detaudit.render.runs import print_est_time_warning

    slowest = max(elapsed)
    if card.est_time is not None and over_estimate(card, slowest):
        print_est_time_warning(err, card.name, card.est_time, slowest)


class RunnerClassType(click.ParamType):
    """A runner class on the command line: ``cpu-intel-6.207-avx512`` or ``h100-1gpu``."""

    name = "CLASS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> RunnerClass:
        from detaudit.errors import InputError

        if isinstance(value, RunnerClass):
            return value
        try:
            return RunnerClass.parse(str(value))
        except InputError as exc:
            self.fail(exc.message, param, ctx)


def _perturbed(on: bool, first: int) -> tuple[Any, ...]:
    """``--perturb-schedule``: each run gets a schedule number (the first run ``first``)."""
    if not on:
        return ()
    from detaudit.trace import perturb_hook

    return (perturb_hook(first),)


def _elapsed(states: list[Any]) -> list[float]:
    return [s.elapsed for s in states if s is not None and s.started is not None]


@click.command(context_settings={"ignore_unknown_options": False})
@card_and_extra_args
@click.option("--runs", "-n", default=3, show_default=True, type=click.IntRange(min=2), help="How many runs must agree.")
@click.option("--parallel", "-j", default=1, show_default=True, type=click.IntRange(min=1), help="Runs at once (disjoint GPU sets when the card sets gpus_per_run).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Standard file (default: <standards_dir>/<name>.<runner class>.json).")
@click.option("--update", is_flag=True, help="Replace an existing standard, printing what changed.")
@click.option("--no-write", is_flag=True, help="Compare the N runs and write nothing (no standard, no lock): a reproduction check.")
@click.option("--allow-partial", is_flag=True, help="Record only the agreeing series; list the dropped ones in the file.")
@click.option("--format", "fmt", type=click.Choice(FORMAT_NAMES), default=None,
              help="Standard file format (default: the existing standard's, else detaudit); exact, exit 2 where it cannot hold a value.")
@click.option("--drop-nan-series", is_flag=True, help="With --format miles: leave out every series holding a NaN, naming each in meta.")
@click.option("--metrics", "from_metrics", is_flag=True,
              help="The arguments are metrics files of runs already made (2 or more), not a CARD: write --out only if they agree.")
@click.option("--runner-class", type=RunnerClassType(), help="With --metrics: the runner class the runs ran on, written into the standard.")
@step_key_option("With --metrics: step field for lines without a step_key.")
@exclude_include
@workdir_option("Where run dirs go; its run dirs must be empty (default: a new temp dir, removed when every run passed).")
@cluster_option("each run")
@junit_option("one testcase per compared series")
@click.option("--no-doctor", is_flag=True, help="Skip the determinism preflight (detaudit doctor --no-ray) that runs first.")
@json_option("the outcome (the runs' diff, the trace report)")
@trace_option("Fail closed: runs whose metrics agree make no standard (exit 1) when their traces differ or are "
              "incomplete, or run 1's shows a draw from a generator its process never seeded or seeds repeated "
              "within a step (seed collisions between replicas are warned; with --allow-partial dropping series, "
              "the trace only reports).")
@perturb_option("run k: schedule k; runs 1 and 2 mirrored, and so on; the standard says so")
@html_options(scan=True)
@handle_errors
def record(card: Path | None, extra_args: tuple[str, ...], runs: int, parallel: int, out: Path | None, update: bool,
           no_write: bool, allow_partial: bool, fmt: str | None, drop_nan_series: bool, from_metrics: bool,
           runner_class: RunnerClass | None, step_key: str | None, exclude: tuple[str, ...],
           include: tuple[str, ...], workdir: Path | None, cluster: str | None, junit_xml: Path | None, no_doctor: bool,
           as_json: bool, trace: str | None, perturb_schedule: bool, html: Path | None, overwrite_html: bool,
           scan_report: Path | None) -> None:
    """Run CARD's command N times; write its standard only if all runs agree.

    A card (TOML) says how to run one training job and where its standards live: `detaudit init
    -- python train.py` writes one. Arguments after `--` are appended to the command. Without a
    CARD, the bundled demo recipe runs where detaudit's repository and its recipe extra are
    installed; elsewhere it is an error. With --metrics the arguments are metrics files of runs
    already made: the standard (--out) is written only if they agree, by the same rules.

    \b
    Examples:
      detaudit record train/detaudit.toml --runs 3
      detaudit record train/detaudit.toml --update                 # re-record, printing what changed
      detaudit record --metrics night1.jsonl night2.jsonl --out standards/train.json
      detaudit record recipes/sd3_pickscore_nft.toml --no-write -- --no-seed-rollout-manager
      detaudit record recipes/sd3_pickscore_nft.toml --perturb-schedule --trace   # order-dependence shows
    """
    from detaudit.flows.record import record as run_record
    from detaudit.render.runs import print_jobs

    if no_write and (update or out is not None or allow_partial or fmt is not None or drop_nan_series):
        raise click.UsageError("--no-write writes nothing: it takes no --update, --out, --allow-partial or --format")
    if from_metrics:
        files = tuple(p for p in (card, *(Path(a) for a in extra_args)) if p is not None)
        _record_metrics(files, out=out, update=update, no_write=no_write, allow_partial=allow_partial, fmt=fmt,
                        drop_nan_series=drop_nan_series, runner_class=runner_class, step_key=step_key, exclude=exclude,
                        include=include, workdir=workdir, cluster=cluster, junit_xml=junit_xml, no_doctor=no_doctor,
                        as_json=as_json, trace=trace, html=html, overwrite_html=overwrite_html, scan_report=scan_report)
    if runner_class is not None or step_key is not None:
        raise click.UsageError("--runner-class and --step-key are for --metrics: a CARD's runs are probed, and its "
                               "step_key is the card's")
    loaded = card_or_demo(card)
    card = loaded.path
    reports = Reports(f"detaudit record {card}", card=str(card), subject=str(card), as_json=as_json, ci=True,
                      junit_xml=junit_xml, html=html, overwrite_html=overwrite_html, scan_report=scan_report)
    reports.prepare([(card, "the card"), *_command_files(loaded)])  # the standard's path joins them in the flow
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, runs, f"detaudit record {card}")
    nothing = "nothing written" if no_write else "no standard written"

    def on_start(base: Path, cls: RunnerClass) -> None:
        if not no_doctor:  # the preflight, once the command is known to be valid: warnings, the runs decide
            from detaudit.env.doctor import run_doctor
            from detaudit.render.environment import print_doctor

            print_doctor(run_doctor(loaded, ray=False), err_console, only_failing=True)
        where = f" as Ray jobs on {cluster}" if cluster else ""
        perturbed = ", completion order perturbed (--perturb-schedule)" if perturb_schedule else ""
        err_console.print(f"{PREFIX} runner class {cls}; {runs} runs{escape(where)}{perturbed} in {base}")

    try:
        with display:
            result = run_record(
                loaded, runs=runs, parallel=parallel, out=out, update=update, allow_partial=allow_partial, fmt=fmt,
                drop_nan_series=drop_nan_series, extra_args=extra_args, exclude=exclude, include=include, workdir=workdir,
                write=not no_write, cluster=cluster, on_update=display.update, on_start=on_start, trace=trace,
                paths=reports.paths,
                env_hooks=_perturbed(perturb_schedule, first=1),
            )
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, nothing)
    print_jobs(err_console, result.runs)
    _warn_est_time(err_console, result.card, _elapsed(result.runs))
    emit_outcome(result, reports, out_console, err_console)
    exit_with(result.ok)


def _record_metrics(files: tuple[Path, ...], *, out: Path | None, update: bool, no_write: bool, allow_partial: bool,
                    fmt: str | None, drop_nan_series: bool, runner_class: RunnerClass | None, step_key: str | None,
                    exclude: tuple[str, ...], include: tuple[str, ...], workdir: Path | None, cluster: str | None,
                    junit_xml: Path | None, no_doctor: bool, as_json: bool, trace: str | None, html: Path | None,
                    overwrite_html: bool, scan_report: Path | None) -> NoReturn:
    """``record --metrics FILE FILE...``: a standard from runs already made, by record's rules."""
    from detaudit.flows.record import record_metrics

    ctx = click.get_current_context()
    given = [name for name, value in (("--parallel", ctx.get_parameter_source("parallel")),
                                      ("--runs", ctx.get_parameter_source("runs")))
             if value != click.core.ParameterSource.DEFAULT]
    given += [name for name, value in (("--workdir", workdir), ("--cluster", cluster), ("--no-doctor", no_doctor),
                                       ("--trace", trace), ("--scan", scan_report)) if value]
    if given:
        raise click.UsageError(f"--metrics compares files of runs already made: nothing runs, so it takes no "
                               f"{', '.join(given)}")
    if not files:
        raise click.UsageError("--metrics needs the metrics files (two or more) of runs that should agree")
    label = " ".join(str(f) for f in files)
    reports = Reports(f"detaudit record --metrics {label}", card=label, subject=label, as_json=as_json, ci=True,
                      junit_xml=junit_xml, html=html, overwrite_html=overwrite_html)
    reports.prepare([(f, "a metrics file it compares") for f in files])
    out_console, err_console = console(), console(stderr=True)
    result = record_metrics(files, out=out, update=update, allow_partial=allow_partial, fmt=fmt,
                            drop_nan_series=drop_nan_series, exclude=exclude, include=include, step_key=step_key,
                            runner_class=runner_class, write=not no_write, paths=reports.paths)
    emit_outcome(result, reports, out_console, err_console)
    if result.standard is not None and result.standard.runner_class is None and result.ok and not no_write:
        err_console.print(f"{PREFIX} note: no --runner-class: the standard names none, so verify cannot check "
                          "where a run ran")
    exit_with(result.ok)


@click.command(context_settings={"ignore_unknown_options": False})
@card_and_extra_args
@click.option("--metrics", type=click.Path(dir_okay=False, path_type=Path), help="Verify this metrics JSONL instead of running CARD.")
@click.option("--standard", type=click.Path(dir_okay=False, path_type=Path), help="Standard file, any format (detected); default: from CARD and the runner class.")
@click.option("--allow-other-runner", is_flag=True, help="Exit 0 (SKIPPED), not 1 (NOT VERIFIED), when the only standard is for another runner class.")
@click.option("--strict-runner", is_flag=True, help="Exit 1 when the runner class differs from the standard's (the default; kept for old scripts).")
@click.option("--runner-class", type=RunnerClassType(),
              help="With --metrics and no CARD: the runner class the run ran on, checked against the standard's (else not checked, and said so).")
@step_key_option()
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Leave the standard's series matching GLOB out of the comparison (repeatable; the report lists them).")
@click.option("--include", multiple=True, metavar="GLOB", help="Compare series matching GLOB even if --exclude names them.")
@workdir_option("Where the run dir goes; it must be empty (default: a new temp dir, removed when the run passed). "
                "With --suite: each card's under WORKDIR/<card file stem>, kept.")
@cluster_option("the run")
@click.option("--suite", metavar="NAME", help="Verify every card of suite NAME (cards in --cards): one table, one exit code.")
@click.option("--cards", type=click.Path(file_okay=False, path_type=Path), default=Path("recipes"), show_default=True,
              help="Folder of cards for --suite.")
@junit_option("one testcase per series (per card with --suite)")
@trace_option()
@perturb_option("schedule 2: the mirror of a recorded run 1's")
@json_option("the outcome (failing series, environment differences, the trace report)")
@html_options(scan=True)
@handle_errors
def verify(card: Path | None, extra_args: tuple[str, ...], metrics: Path | None, standard: Path | None,
           allow_other_runner: bool, strict_runner: bool, runner_class: RunnerClass | None, step_key: str | None,
           exclude: tuple[str, ...], include: tuple[str, ...], workdir: Path | None, cluster: str | None,
           suite: str | None, cards: Path, junit_xml: Path | None, trace: str | None, perturb_schedule: bool,
           as_json: bool, html: Path | None, overwrite_html: bool, scan_report: Path | None) -> None:
    """Check one run of CARD (or --metrics RUN.jsonl) against its standard, exactly.

    Without CARD or --metrics, the bundled demo recipe runs where detaudit's repository and its
    recipe extra are installed; elsewhere it is an error. Reads standards in any format, detected
    from the content (detaudit, miles, Megatron-LM, TorchTitan, NeMo-RL). --metrics without a
    CARD checks no runner class unless --runner-class names it (the report says so). Exit 0 on PASSED (or PASSED (approximate) for a runner class the
    card gives tolerances, or SKIPPED with --allow-other-runner), 1 on a mismatch, a failed run, or NOT VERIFIED (no standard for
    this runner class, or one with no series), 2 on bad input.

    \b
    Examples:
      detaudit verify train/detaudit.toml --junit-xml reports/detaudit.xml
      detaudit verify --metrics run/metrics.jsonl --standard golden_values.json --runner-class h100-1gpu
      detaudit verify --suite cpu --cards recipes
    """
    from detaudit.flows.verify import verify as run_verify
    from detaudit.render.runs import print_jobs

    if strict_runner and allow_other_runner:
        raise click.UsageError("--strict-runner and --allow-other-runner contradict each other")
    if suite is not None:
        if card is not None or metrics is not None or standard is not None or extra_args or cluster \
                or trace or as_json or exclude or include or runner_class is not None or perturb_schedule:
            raise click.UsageError("--suite verifies the suite's cards: it takes no CARD, --metrics, --standard, "
                                   "--cluster, --trace, --perturb-schedule, --json, --exclude, --include or extra args "
                                   "(--junit-xml gives one report)")
        _verify_suite(suite, cards, allow_other_runner, junit_xml, html, overwrite_html, scan_report, workdir)
    if perturb_schedule and metrics is not None:
        raise click.UsageError("--perturb-schedule perturbs a run: give a CARD, not --metrics")
    loaded = card_or_demo(card) if card is not None or metrics is None else None
    card = loaded.path if loaded is not None else None
    subject = str(card if card is not None else metrics)
    reports = Reports(f"detaudit verify {subject}", card=str(card) if card is not None else None, subject=subject,
                      as_json=as_json, ci=True, junit_xml=junit_xml, html=html, overwrite_html=overwrite_html,
                      scan_report=scan_report)
    # the standard found from the card and the runner class joins them in the flow, before the run
    reports.prepare([(card, "the card"), (metrics, "the metrics it checks (--metrics)"),
                     (standard, "the standard it checks (--standard)"),
                     *(_command_files(loaded) if loaded is not None else [])])
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, 1, f"detaudit verify {card}")
    try:
        with display:
            result = run_verify(loaded, metrics=metrics, standard=standard, allow_other_runner=allow_other_runner,
                                step_key=step_key, extra_args=extra_args, workdir=workdir, cluster=cluster,
                                on_update=display.update, trace=trace, exclude=exclude, include=include,
                                runner_class=runner_class, paths=reports.paths,
                                env_hooks=_perturbed(perturb_schedule, first=2))
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "not verified")
    if metrics is None and result.run is not None:
        _warn_est_time(err_console, result.card, _elapsed([result.run]))
    if result.run is not None:
        print_jobs(err_console, [result.run])
    if result.standard_trace is not None:
        err_console.print(f"{PREFIX} the standard carries a trace ({escape(str(result.standard_trace))}): this run "
                          "was traced and compared with it")
    emit_outcome(result, reports, out_console, err_console)
    exit_with(result.ok)


def _command_files(card: Card) -> list[tuple[Path | None, str]]:
    from detaudit.data.card import command_files

    return [(path, f"a file card {card.name}'s command names") for path in command_files(card)]


def _verify_suite(suite: str, cards_dir: Path, allow_other_runner: bool, junit_xml: Path | None, html: Path | None = None,
                  overwrite_html: bool = False, scan_report: Path | None = None, workdir: Path | None = None) -> None:
    from detaudit.flows.suite import find_cards, over_estimate, verify_suite
    from detaudit.render.runs import print_est_time_warning

    reports = Reports(f"detaudit verify --suite {suite}", subject=suite, ci=True, junit_xml=junit_xml, html=html,
                      overwrite_html=overwrite_html, scan_report=scan_report)
    found = find_cards(cards_dir, suite)
    from detaudit.standards.store import standards_of_card

    reports.prepare([(c.path, f"the card {c.name}") for c in found]
                    + [(p, f"a standard of card {c.name}") for c in found for p, _ in standards_of_card(c)]
                    + [item for c in found for item in _command_files(c)])
    out_console, err_console = console(), console(stderr=True)
    total = len(found)

    def on_card(card: Any) -> None:
        index = found.index(card) + 1
        err_console.print(f"{PREFIX} suite {escape(suite)}: card {index}/{total} {escape(card.name)} ({escape(str(card.path))})")

    display = RunDisplay(err_console, 1, f"detaudit verify --suite {suite}")
    try:
        with display:
            result = verify_suite(found, suite=suite, allow_other_runner=allow_other_runner, on_card=on_card,
                                  on_update=display.update, workdir=workdir)
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "not verified")
    for o in result.outcomes:
        run_time = o.run_elapsed
        if run_time is not None and o.card.est_time is not None and over_estimate(o.card, run_time):
            print_est_time_warning(err_console, o.card.name, o.card.est_time, run_time)
    emit_outcome(result, reports, out_console, err_console)
    sys.exit(result.exit_code)


@click.command(context_settings={"ignore_unknown_options": False})
@card_and_extra_args
@click.option("--modules", "modules", is_flag=True, help="Also fingerprint every nn.Module call's inputs and outputs.")
@click.option("--save", type=click.Path(file_okay=False, path_type=Path), help="Save the trace to this new folder (for --against on another machine).")
@click.option("--against", type=click.Path(file_okay=False, path_type=Path), help="Compare with a trace saved by --save; name the first differing draw or module.")
@click.option("--parity", metavar="A:B", help="With --modules: pair the module calls of processes A and B (e.g. RolloutEngine:TrainActor) by module name and inputs; name the first whose outputs differ (default: the card's parity).")
@json_option("the summary (and comparison)")
@workdir_option("Where the run dir goes (default: a new temp dir).")
@handle_errors
def trace(card: Path | None, extra_args: tuple[str, ...], modules: bool, save: Path | None, against: Path | None,
          parity: str | None, as_json: bool, workdir: Path | None) -> None:
    """Run CARD once with every global-RNG draw traced, in every process; summarise per process.

    Per process (main, Ray actors and tasks, multiprocessing children): draws per generator,
    where it seeded, and draws from generators it never seeded; seed collisions between
    replicas; per-sample seeds repeated within a step. --against DIR names the first draw or
    module that differs from a saved trace. The last line says ok, or every reason it is not.
    Exit 0 when the run finished with a complete trace and none of these was found, 1 when the
    run fails, the trace is incomplete, a process drew from a generator it never seeded (draws
    inside library internals only are listed apart and do not count), replicas' seeds collide,
    seeds repeat within a step, the traces differ (--against) or parity fails (--parity); 2 on
    bad input.

    \b
    Examples:
      detaudit trace recipes/sd3_pickscore_nft.toml
      detaudit trace recipes/sd3_pickscore_nft.toml --save traces/here   # then, on another machine:
      detaudit trace recipes/sd3_pickscore_nft.toml --against traces/here
      detaudit trace recipes/sd3_flow_grpo_parity.toml --modules --parity RolloutEngine:TrainActor
    """
    from detaudit.flows.results import TraceStatus
    from detaudit.flows.trace import trace_card
    from detaudit.render.jsonout import dump_json
    from detaudit.render.runs import print_failed_runs
    from detaudit.render.trace import print_comparison, print_summary, trace_json, verdict_json, verdict_line

    loaded = card_or_demo(card)
    card = loaded.path
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, 1, f"detaudit trace {card}")
    try:
        with display:
            result = trace_card(loaded, mode="modules" if modules else None, extra_args=extra_args, workdir=workdir,
                                save=save, against=against, parity=parity, on_update=display.update)
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "no trace saved")
    if result.status == TraceStatus.RUN_FAILED:
        print_failed_runs(err_console, [result.run])
        out_console.print(f"[red]{PREFIX} trace failed: the run did not finish[/red]")
        sys.exit(EXIT_FAIL)
    assert result.trace is not None
    if as_json:
        doc = trace_json(result.trace, result.unseeded, result.collisions, result.comparison, result.seeds,
                         result.parity)
        doc["saved"] = str(result.saved) if result.saved else None
        doc.update(verdict_json(result))
        click.echo(dump_json(doc))
    else:
        print_summary(out_console, result.trace, result.unseeded, result.collisions, result.seeds, result.parity)
        if result.comparison is not None:
            print_comparison(out_console, result.comparison)
        if result.saved is not None:
            out_console.print(f"{PREFIX} trace saved to {escape(str(result.saved))} ({result.mode})")
        style = "green" if result.ok else "red"
        out_console.print(f"[{style}]{PREFIX} {escape(verdict_line(result))}[/{style}]")
    exit_with(result.ok)
