"""``record``, ``verify`` (and ``verify --suite``) and ``trace``: the commands that run a card."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.markup import escape

from detaudit.cli.base import EXIT_FAIL, ci_error_reports, default_card, exit_with, handle_errors, warn
from detaudit.cli.html_report import emit_html, html_options, prepare_html
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
from detaudit.render.console import PREFIX, RunDisplay, console
from detaudit.runner_class import RunnerClass
from detaudit.standards.formats.registry import FORMATS

# Heavy or rarely used modules are imported inside the commands: nothing here may import torch,
# and `verify --metrics` must start fast.


def _ci_reports(junit_xml: Path | None, title: str, cases: list[Any], verdict: str, detail: str = "") -> None:
    """--junit-xml FILE, and the GitHub job summary when GITHUB_STEP_SUMMARY is set."""
    from detaudit.ci import write_ci_reports

    for text in write_ci_reports(junit_xml, title, cases, verdict, detail):
        warn(text)


def _interrupted(err: Any, exc: KeyboardInterrupt, what: str) -> NoReturn:
    """Ctrl-C (or the CI job's cancel): say so, write the CI reports, exit 1."""
    from detaudit.render.runs import print_interrupted

    print_interrupted(err, exc, what)
    ci_error_reports(click.get_current_context(silent=True), f"interrupted: {what}", "INTERRUPTED", "interrupted")
    sys.exit(EXIT_FAIL)


def _warn_est_time(err: Any, card_path: Path | None, elapsed: list[float]) -> None:
    """Warn when a run took longer than the card's est_time (suite plans read it)."""
    if card_path is None or not elapsed:
        return
    from detaudit.data.card import load_card
    from detaudit.flows.suite import over_estimate
    from detaudit.render.runs import print_est_time_warning

    card = load_card(card_path)
    slowest = max(elapsed)
    if card.est_time is not None and over_estimate(card, slowest):
        print_est_time_warning(err, card.name, card.est_time, slowest)


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
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Standard file format (default: the existing standard's, else detaudit); exact, exit 2 where it cannot hold a value.")
@click.option("--drop-nan-series", is_flag=True, help="With --format miles: leave out every series holding a NaN, naming each in meta.")
@exclude_include
@workdir_option("Where run dirs go; its run dirs must be empty (default: a new temp dir, removed when every run passed).")
@cluster_option("each run")
@junit_option("one testcase per compared series")
@click.option("--no-doctor", is_flag=True, help="Skip the determinism preflight (detaudit doctor --no-ray) that runs first.")
@json_option("the outcome (the runs' diff, the trace report)")
@trace_option
@perturb_option("run k: schedule k; runs 1 and 2 mirrored, and so on; the standard says so")
@html_options(scan=True)
@handle_errors
def record(card: Path | None, extra_args: tuple[str, ...], runs: int, parallel: int, out: Path | None, update: bool,
           no_write: bool, allow_partial: bool, fmt: str | None, drop_nan_series: bool, exclude: tuple[str, ...],
           include: tuple[str, ...], workdir: Path | None, cluster: str | None, junit_xml: Path | None, no_doctor: bool,
           as_json: bool, trace: str | None, perturb_schedule: bool, html: Path | None, overwrite_html: bool,
           scan_report: Path | None) -> None:
    """Run CARD's command N times; write its standard only if all runs agree.

    CARD defaults to the embedded tiny CPU recipe (recipes/sd3_pickscore_nft.toml).
    Arguments after `--` are appended to the command.

    \b
    Examples:
      detaudit record recipes/sd3_pickscore_nft.toml --runs 3
      detaudit record recipes/sd3_pickscore_nft.toml --update      # re-record, printing what changed
      detaudit record recipes/sd3_pickscore_nft.toml --no-write -- --no-seed-rollout-manager
      detaudit record recipes/sd3_pickscore_nft.toml --perturb-schedule --trace   # order-dependence shows
    """
    from detaudit.ci import cases_from_record
    from detaudit.flows.record import record as run_record
    from detaudit.render.jsonout import dump_json
    from detaudit.render.record import print_record, record_document
    from detaudit.render.runs import print_failed_runs, print_jobs, print_workdir_note

    if no_write and (update or out is not None or allow_partial or fmt is not None or drop_nan_series):
        raise click.UsageError("--no-write writes nothing: it takes no --update, --out, --allow-partial or --format")
    card = card or default_card()
    findings = prepare_html(html, overwrite_html, scan_report)
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, runs, f"detaudit record {card}")
    nothing = "nothing written" if no_write else "no standard written"

    def on_start(base: Path, cls: RunnerClass) -> None:
        if not no_doctor:  # the preflight, once the command is known to be valid: warnings, the runs decide
            from detaudit.data.card import load_card
            from detaudit.env.doctor import run_doctor
            from detaudit.render.environment import print_doctor

            print_doctor(run_doctor(load_card(card), ray=False), err_console, only_failing=True)
        where = f" as Ray jobs on {cluster}" if cluster else ""
        perturbed = ", completion order perturbed (--perturb-schedule)" if perturb_schedule else ""
        err_console.print(f"{PREFIX} runner class {cls}; {runs} runs{escape(where)}{perturbed} in {base}")

    try:
        with display:
            result = run_record(
                card, runs=runs, parallel=parallel, out=out, update=update, allow_partial=allow_partial, fmt=fmt,
                drop_nan_series=drop_nan_series, extra_args=extra_args, exclude=exclude, include=include, workdir=workdir,
                write=not no_write, cluster=cluster, on_update=display.update, on_start=on_start, trace=trace,
                env_hooks=_perturbed(perturb_schedule, first=1),
            )
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, nothing)
    print_jobs(err_console, result.runs)
    record_cases = cases_from_record(result, f"detaudit.record.{card.stem}")
    failed = sum(1 for c in record_cases if not c.ok)
    _ci_reports(junit_xml, f"detaudit record {card}", record_cases, str(result.status).upper(),
                f"{len(record_cases) - failed} of {len(record_cases)} series identical across {runs} runs")
    _warn_est_time(err_console, card, _elapsed(result.runs))
    if as_json:
        if result.status == "run-failed":
            print_failed_runs(err_console, result.runs)
        click.echo(dump_json(record_document(result, str(card), runs)))
        print_workdir_note(err_console, result.workdir, result.workdir_removed, result.ok)
    else:
        print_record(result, str(card), runs, written_word=nothing, out=out_console, err=err_console)
    if html is not None:
        from detaudit.data.card import load_card
        from detaudit.render.html.views import record_page

        page = record_page(result, str(card), runs, step_key=load_card(card).step_key, findings=findings)
        emit_html(html, overwrite_html, page, err_console)
    exit_with(result.ok)


@click.command(context_settings={"ignore_unknown_options": False})
@card_and_extra_args
@click.option("--metrics", type=click.Path(dir_okay=False, path_type=Path), help="Verify this metrics JSONL instead of running CARD.")
@click.option("--standard", type=click.Path(dir_okay=False, path_type=Path), help="Standard file, any format (detected); default: from CARD and the runner class.")
@click.option("--allow-other-runner", is_flag=True, help="Exit 0 (SKIPPED), not 1 (NOT VERIFIED), when the only standard is for another runner class.")
@click.option("--strict-runner", is_flag=True, help="Exit 1 when the runner class differs from the standard's (the default; kept for old scripts).")
@step_key_option()
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Leave the standard's series matching GLOB out of the comparison (repeatable; the report lists them).")
@click.option("--include", multiple=True, metavar="GLOB", help="Compare series matching GLOB even if --exclude names them.")
@workdir_option("Where the run dir goes; it must be empty (default: a new temp dir, removed when the run passed).")
@cluster_option("the run")
@click.option("--suite", metavar="NAME", help="Verify every card of suite NAME (cards in --cards): one table, one exit code.")
@click.option("--cards", type=click.Path(file_okay=False, path_type=Path), default=Path("recipes"), show_default=True,
              help="Folder of cards for --suite.")
@junit_option("one testcase per series (per card with --suite)")
@trace_option
@perturb_option("schedule 2: the mirror of a recorded run 1's")
@json_option("the outcome (failing series, environment differences, the trace report)")
@html_options(scan=True)
@handle_errors
def verify(card: Path | None, extra_args: tuple[str, ...], metrics: Path | None, standard: Path | None,
           allow_other_runner: bool, strict_runner: bool, step_key: str | None, exclude: tuple[str, ...],
           include: tuple[str, ...], workdir: Path | None, cluster: str | None, suite: str | None, cards: Path,
           junit_xml: Path | None, trace: str | None, perturb_schedule: bool, as_json: bool, html: Path | None,
           overwrite_html: bool, scan_report: Path | None) -> None:
    """Check one run of CARD (or --metrics RUN.jsonl) against its standard, exactly.

    CARD defaults to the embedded tiny CPU recipe when neither CARD nor --metrics is given.
    Reads standards in any format, detected from the content (detaudit, miles, Megatron-LM,
    TorchTitan, NeMo-RL). Exit 0 on PASSED (or PASSED (approximate) for a runner class the
    card gives tolerances, or SKIPPED with --allow-other-runner), 1 on a mismatch, a failed run, or NOT VERIFIED (no standard for
    this runner class, or one with no series), 2 on bad input.

    \b
    Examples:
      detaudit verify recipes/sd3_pickscore_nft.toml --junit-xml reports/detaudit.xml
      detaudit verify --metrics run/metrics.jsonl --standard golden_values.json
      detaudit verify --suite cpu --cards recipes
    """
    from detaudit.ci import cases_from_verify
    from detaudit.flows.verify import verify as run_verify
    from detaudit.render.jsonout import dump_json
    from detaudit.render.runs import print_failed_runs, print_jobs, print_workdir_note
    from detaudit.render.suite import status_detail
    from detaudit.render.verify import print_verify, verify_document
    from detaudit.results import VerifyStatus

    if strict_runner and allow_other_runner:
        raise click.UsageError("--strict-runner and --allow-other-runner contradict each other")
    if suite is not None:
        if card is not None or metrics is not None or standard is not None or extra_args or workdir is not None or cluster \
                or trace or as_json or exclude or include or perturb_schedule:
            raise click.UsageError("--suite verifies the suite's cards: it takes no CARD, --metrics, --standard, --workdir, "
                                   "--cluster, --trace, --perturb-schedule, --json, --exclude, --include or extra args "
                                   "(--junit-xml gives one report)")
        _verify_suite(suite, cards, allow_other_runner, junit_xml, html, overwrite_html, scan_report)
    if perturb_schedule and metrics is not None:
        raise click.UsageError("--perturb-schedule perturbs a run: give a CARD, not --metrics")
    findings = prepare_html(html, overwrite_html, scan_report)
    if card is None and metrics is None:
        card = default_card()
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, 1, f"detaudit verify {card}")
    try:
        with display:
            result = run_verify(card, metrics=metrics, standard=standard, allow_other_runner=allow_other_runner,
                                step_key=step_key, extra_args=extra_args, workdir=workdir, cluster=cluster,
                                on_update=display.update, trace=trace, exclude=exclude, include=include,
                                env_hooks=_perturbed(perturb_schedule, first=2))
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "not verified")
    label = card.stem if card is not None else Path(str(metrics)).stem
    status = VerifyStatus(result.status)
    _ci_reports(junit_xml, f"detaudit verify {card or metrics}",
                cases_from_verify(result, f"detaudit.verify.{label}", time_s=result.run.elapsed if result.run else 0.0),
                status.label, f"{status_detail(status, result)} ({result.standard_path})")
    if metrics is None and result.run is not None:
        _warn_est_time(err_console, card, _elapsed([result.run]))
    if result.run is not None:
        print_jobs(err_console, [result.run])
    if result.standard_trace is not None:
        err_console.print(f"{PREFIX} the standard carries a trace ({escape(str(result.standard_trace))}): this run "
                          "was traced and compared with it")
    if as_json:
        if status == VerifyStatus.RUN_FAILED and result.run is not None:
            print_failed_runs(err_console, [result.run])
        click.echo(dump_json(verify_document(result, str(card) if card is not None else None)))
        if result.workdir is not None:
            print_workdir_note(err_console, result.workdir, result.workdir_removed, result.ok)
    else:
        print_verify(result, out=out_console, err=err_console)
    if html is not None:
        from detaudit.render.html.views import verify_page

        page = verify_page(result, str(card) if card is not None else None, step_key=step_key, findings=findings)
        emit_html(html, overwrite_html, page, err_console)
    exit_with(result.ok)


def _verify_suite(suite: str, cards_dir: Path, allow_other_runner: bool, junit_xml: Path | None, html: Path | None = None,
                  overwrite_html: bool = False, scan_report: Path | None = None) -> None:
    from detaudit.ci import cases_from_suite
    from detaudit.flows.suite import find_cards, over_estimate, verify_suite
    from detaudit.render.runs import print_est_time_warning
    from detaudit.render.suite import print_suite, suite_passed_text

    findings = prepare_html(html, overwrite_html, scan_report)
    out_console, err_console = console(), console(stderr=True)
    found = find_cards(cards_dir, suite)
    total = len(found)

    def on_card(card: Any) -> None:
        index = found.index(card) + 1
        err_console.print(f"{PREFIX} suite {escape(suite)}: card {index}/{total} {escape(card.name)} ({escape(str(card.path))})")

    display = RunDisplay(err_console, 1, f"detaudit verify --suite {suite}")
    try:
        with display:
            result = verify_suite(found, suite=suite, allow_other_runner=allow_other_runner, on_card=on_card,
                                  on_update=display.update)
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "not verified")
    print_suite(result, out_console)
    for o in result.outcomes:
        run_time = o.run_elapsed
        if run_time is not None and o.card.est_time is not None and over_estimate(o.card, run_time):
            print_est_time_warning(err_console, o.card.name, o.card.est_time, run_time)
    _ci_reports(junit_xml, f"detaudit verify --suite {suite}", cases_from_suite(result),
                {0: "PASSED", 1: "FAILED"}.get(result.exit_code, "ERROR"), suite_passed_text(result))
    if html is not None:
        from detaudit.render.html.views import suite_page

        emit_html(html, overwrite_html, suite_page(result, findings=findings), err_console)
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
    replicas. --against DIR names the first draw or module that differs from a saved trace.
    Exit 0 on success (and identical traces with --against), 1 when the run fails or the
    traces differ, 2 on bad input.

    \b
    Examples:
      detaudit trace recipes/sd3_pickscore_nft.toml
      detaudit trace recipes/sd3_pickscore_nft.toml --save traces/here   # then, on another machine:
      detaudit trace recipes/sd3_pickscore_nft.toml --against traces/here
      detaudit trace recipes/sd3_flow_grpo_parity.toml --modules --parity RolloutEngine:TrainActor
    """
    from detaudit.flows.trace import trace_card
    from detaudit.render.jsonout import dump_json
    from detaudit.render.runs import print_failed_runs
    from detaudit.render.trace import print_comparison, print_summary, trace_json
    from detaudit.results import TraceStatus

    card = card or default_card()
    out_console, err_console = console(), console(stderr=True)
    display = RunDisplay(err_console, 1, f"detaudit trace {card}")
    try:
        with display:
            result = trace_card(card, mode="modules" if modules else None, extra_args=extra_args, workdir=workdir,
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
        click.echo(dump_json(doc))
    else:
        print_summary(out_console, result.trace, result.unseeded, result.collisions, result.seeds, result.parity)
        if result.comparison is not None:
            print_comparison(out_console, result.comparison)
        if result.saved is not None:
            out_console.print(f"{PREFIX} trace saved to {escape(str(result.saved))} ({result.mode})")
    exit_with(result.ok)
