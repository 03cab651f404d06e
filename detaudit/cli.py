"""The ``detaudit`` command: a thin layer over the library.

Exit codes, everywhere: 0 success (identical, written, passed, skipped), 1 the audit
failed (series differ, a run failed, a finding reached --fail-on), 2 usage or input errors
(one line on stderr naming the file and line).
"""

from __future__ import annotations

import sys
import warnings
from functools import wraps
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from detaudit import __version__
from detaudit.errors import InputError

# Heavy or rarely used modules are imported inside the commands: `detaudit diff` and
# `verify --metrics` must start fast, and nothing here may import torch.

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def _console(stderr: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) nothing is hard-wrapped: a line stays one line, and
    # tables take the width they need (grep and diff see whole lines).
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, highlight=False)
    return Console(stderr=stderr, highlight=False, width=100_000, soft_wrap=True)


def _stdout() -> Console:
    return _console()


def _stderr() -> Console:
    return _console(stderr=True)


def _one_line_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    click.echo(f"detaudit: warning: {message}", err=True)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn InputError into one stderr line and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warnings.showwarning = _one_line_warning
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            click.echo(f"detaudit: error: {exc}", err=True)
            sys.exit(EXIT_INPUT)

    return wrapper


class OneLineErrors(click.Group):
    """Usage errors as one line, ``detaudit: error: ...``, exit 2 (not click's usage block)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("detaudit: aborted", err=True)
            sys.exit(EXIT_FAIL)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.info_name}: " if ctx is not None and ctx.parent is not None else ""
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            click.echo(f"detaudit: error: {where}{message}{hint}", err=True)
            sys.exit(EXIT_INPUT)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="detaudit")
def main() -> None:
    """Audit ML training runs for bitwise determinism, and record and verify e2e standards."""


# --- diff ------------------------------------------------------------------------------


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--step-key", help="Step field for lines without a step_key (default: line index).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Also exclude series matching GLOB (repeatable).")
@click.option("--include", multiple=True, metavar="GLOB", help="Compare series matching GLOB even if excluded.")
@handle_errors
def diff(runs: tuple[Path, ...], as_json: bool, step_key: str | None, exclude: tuple[str, ...], include: tuple[str, ...]) -> None:
    """Compare metrics JSONL files exactly; each run against the first.

    Exit 0 when every compared series is identical, 1 when any differ, 2 on bad input.
    """
    from detaudit.data.compare import diff_runs
    from detaudit.data.exclusion import Exclusion
    from detaudit.data.metrics import read_metrics_many
    from detaudit.report import diff_json, print_diff

    if len(runs) < 2:
        raise click.UsageError("diff needs at least two metrics files")
    exclusion = Exclusion(cli=exclude, include=include)
    parsed = read_metrics_many(runs, default_step_key=step_key, exclusion=exclusion)
    report = diff_runs(parsed, labels=[str(p) for p in runs])
    report.exclude_patterns = exclusion.patterns()
    if as_json:
        click.echo(diff_json(report))
    else:
        print_diff(report, _stdout())
    sys.exit(EXIT_OK if report.ok else EXIT_FAIL)


# --- record / verify ---------------------------------------------------------------------


class RunDisplay:
    """Progress of the runs: a live table on a terminal, one line per change otherwise."""

    def __init__(self, console: Console, total: int, label: str) -> None:
        self.console = console
        self.total = total
        self.label = label
        self.live: Live | None = None
        self.seen: dict[int, str] = {}

    def __enter__(self) -> "RunDisplay":
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, states: list[Any]) -> None:
        from detaudit.run.local import last_log_line

        if self.live is not None:
            table = Table(title=self.label, title_justify="left", header_style="bold")
            for col, width in (("run", 5), ("status", 7), ("elapsed", 8), ("GPUs", 4)):
                table.add_column(col, min_width=width, no_wrap=True)
            table.add_column("last log line", overflow="ellipsis", no_wrap=True, ratio=1)
            for s in states:
                last = last_log_line(s.spec.log_path) if s.started is not None else ""
                gpus = ",".join(s.spec.gpus) if s.spec.gpus else "-"
                table.add_row(f"{s.spec.index + 1}/{self.total}", s.status, f"{s.elapsed:.1f}s", gpus, escape(last[-100:]))
            self.live.update(table)
            return
        for s in states:
            if self.seen.get(s.spec.index) != s.status and s.status != "waiting":
                self.seen[s.spec.index] = s.status
                extra = f" in {s.elapsed:.1f}s" if s.status != "running" else f" (log {s.spec.log_path})"
                self.console.print(f"\\[detaudit] run {s.spec.index + 1}/{self.total} {s.status}{extra}")


def _print_jobs(console: Console, states: list[Any]) -> None:
    from detaudit.report import job_lines

    for line in job_lines(states):
        console.print(f"\\[detaudit] {escape(line)}")


def _print_failed_run(console: Console, states: list[Any]) -> None:
    from detaudit.report import stopped_jobs_message
    from detaudit.run.local import log_tail

    for s in states:
        if s.status in ("failed", "timeout"):
            why = f"exit code {s.returncode}" if s.status == "failed" else f"timed out after {s.spec.timeout_s:g}s"
            console.print(f"[red]\\[detaudit] run {s.spec.index + 1} {why}[/red]; log {escape(str(s.spec.log_path))}:")
            console.print(escape(log_tail(s.spec.log_path, 30)), markup=True)
    jobs = stopped_jobs_message(states)
    if jobs is not None:  # --cluster runs: the Ray jobs stopped, by id
        if jobs:
            console.print(f"\\[detaudit] {escape(jobs)}")
        return
    killed = [s.spec.index + 1 for s in states if s.status == "killed"]
    if killed:
        console.print(f"\\[detaudit] killed the process groups of runs {', '.join(map(str, killed))}")


def _print_trace(console: Console, report: Any) -> None:
    """With --trace: the first differing draw/module, unseeded draws, collisions."""
    if report is None:
        return
    from detaudit.trace.report import runs_trace_lines

    for style, line in runs_trace_lines(report):
        console.print(f"[{style}]\\[detaudit] trace: {escape(line)}[/{style}]")


def default_card() -> Path:
    """The embedded default: the tiny CPU SD3.5 DiffusionNFT + PickScore recipe."""
    from importlib.resources import files

    return Path(str(files("recipes") / "sd3_pickscore_nft.toml"))


def _workdir_note(console: Console, workdir: Path | None, removed: bool, ok: bool) -> None:
    if workdir is None:
        return
    if removed:
        console.print(f"\\[detaudit] removed the run dir {escape(str(workdir))} (every run passed)")
    elif not ok:
        console.print(f"\\[detaudit] run dirs kept for inspection: {escape(str(workdir))}")


def _interrupted(console: Console, exc: KeyboardInterrupt, written: str) -> None:
    from detaudit.report import cluster_interrupted_message, interrupted_message

    if getattr(exc, "stopped", None) is not None:  # a --cluster batch: the Ray jobs it stopped
        message = cluster_interrupted_message(getattr(exc, "signal_name", "SIGINT"), exc.stopped, written)  # type: ignore[attr-defined]
    else:
        message = interrupted_message(getattr(exc, "signal_name", "SIGINT"), getattr(exc, "states", []),
                                      getattr(exc, "repeated", False), written)
    console.print(f"[red]\\[detaudit] {escape(message)}[/red]")
    sys.exit(EXIT_FAIL)


def _ci_reports(junit_xml: Path | None, title: str, cases: list[Any], headline: str) -> None:
    """--junit-xml FILE, and the GitHub job summary when GITHUB_STEP_SUMMARY is set."""
    from detaudit.ci import append_step_summary, summary_markdown, write_junit

    if junit_xml is not None:
        write_junit(junit_xml, title, cases)
    append_step_summary(summary_markdown(title, cases, headline))


def _warn_est_time(console: Console, card_path: Path | None, states: list[Any]) -> None:
    """Warn when a run took longer than the card's est_time (suite plans read it)."""
    if card_path is None:
        return
    from detaudit.data.card import load_card
    from detaudit.report import est_time_warning
    from detaudit.flows.suite import over_estimate

    card = load_card(card_path)
    slowest = max((s.elapsed for s in states if s is not None and s.started is not None), default=None)
    if slowest is not None and card.est_time is not None and over_estimate(card, slowest):
        console.print(f"[yellow]\\[detaudit] warning: {escape(est_time_warning(card.name, card.est_time, slowest))}[/yellow]")


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--runs", "-n", default=3, show_default=True, type=click.IntRange(min=2), help="How many runs must agree.")
@click.option("--parallel", "-j", default=1, show_default=True, type=click.IntRange(min=1), help="Runs at once (disjoint GPU sets when the card sets gpus_per_run).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Standard file (default: <standards_dir>/<name>.<runner class>.json).")
@click.option("--update", is_flag=True, help="Replace an existing standard, printing what changed.")
@click.option("--no-write", is_flag=True, help="Compare the N runs and write nothing (no standard, no lock): a reproduction check.")
@click.option("--allow-partial", is_flag=True, help="Record only the agreeing series; list the dropped ones in the file.")
@click.option("--format", "fmt", type=click.Choice(["detaudit", "miles", "megatron", "torchtitan", "nemo"]), default=None,
              help="Standard file format (default: the existing standard's, else detaudit); exact, exit 2 where it cannot hold a value.")
@click.option("--drop-nan-series", is_flag=True, help="With --format miles: leave out every series holding a NaN, naming each in meta.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Also exclude series matching GLOB.")
@click.option("--include", multiple=True, metavar="GLOB", help="Compare series matching GLOB even if excluded.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Where run dirs go; its run dirs must be empty (default: a new temp dir, removed when every run passed).")
@click.option("--cluster", metavar="ADDRESS", help="Run each run as a Ray job on this cluster (http://HEAD:8265, or auto).")
@click.option("--junit-xml", type=click.Path(dir_okay=False, path_type=Path), help="Also write a JUnit XML report: one testcase per compared series.")
@click.option("--no-doctor", is_flag=True, help="Skip the determinism preflight (detaudit doctor --no-ray) that runs first.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object on stdout (the runs' diff, the trace report).")
@click.option("--trace", type=click.Choice(["rng", "modules"]), is_flag=False, flag_value="rng", default=None,
              help="Trace every global-RNG draw in every process of the run(s) (--trace=modules: and every nn.Module call); name the first that differs.")
@handle_errors
def record(card: Path, extra_args: tuple[str, ...], runs: int, parallel: int, out: Path | None, update: bool,
           no_write: bool, allow_partial: bool, fmt: str | None, drop_nan_series: bool, exclude: tuple[str, ...], include: tuple[str, ...],
           workdir: Path | None, cluster: str | None, junit_xml: Path | None, no_doctor: bool, trace: str | None,
           as_json: bool) -> None:
    """Run CARD's command N times; write its standard only if all runs agree.

    CARD defaults to the embedded tiny CPU recipe (recipes/sd3_pickscore_nft.toml).
    Arguments after `--` are appended to the command, e.g.
    `detaudit record recipes/sd3_pickscore_nft.toml --no-write -- --no-seed-rollout-manager`.
    """
    from detaudit.flows.record import record as run_record
    from detaudit.report import print_diff, review_lines

    if no_write and (update or out is not None or allow_partial or fmt is not None or drop_nan_series):
        raise click.UsageError("--no-write writes nothing: it takes no --update, --out, --allow-partial or --format")
    card = card or default_card()
    out_console, err_console = _stdout(), _stderr()
    display = RunDisplay(err_console, runs, f"detaudit record {card}")
    nothing = "nothing written" if no_write else "no standard written"

    def on_start(base: Path, cls: list[str]) -> None:
        if not no_doctor:  # the preflight, once the command is known to be valid: warnings, the runs decide
            from detaudit.data.card import load_card
            from detaudit.env.doctor import run_doctor
            from detaudit.report import print_doctor

            print_doctor(run_doctor(load_card(card), ray=False), err_console, only_failing=True)
        where = f" as Ray jobs on {cluster}" if cluster else ""
        err_console.print(f"\\[detaudit] runner class {'-'.join(cls)}; {runs} runs{escape(where)} in {base}")

    try:
        with display:
            result = run_record(
                card, runs=runs, parallel=parallel, out=out, update=update, allow_partial=allow_partial, fmt=fmt,
                drop_nan_series=drop_nan_series, extra_args=extra_args, exclude=exclude, include=include, workdir=workdir, write=not no_write,
                cluster=cluster, on_update=display.update, on_start=on_start, trace=trace,
            )
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, nothing)
    _print_jobs(err_console, result.runs)
    from detaudit.ci import cases_from_record

    record_cases = cases_from_record(result, f"detaudit.flows.record.{card.stem}")
    failed = sum(1 for c in record_cases if not c.ok)
    _ci_reports(junit_xml, f"detaudit record {card}", record_cases,
                f"{result.status}: {len(record_cases) - failed} of {len(record_cases)} series identical across {runs} runs")
    _warn_est_time(err_console, card, result.runs)
    if as_json:
        from detaudit.report import dump_json, record_document

        if result.status == "run-failed":
            _print_failed_run(err_console, result.runs)
        click.echo(dump_json(record_document(result, str(card), runs)))
        _workdir_note(err_console, result.workdir, result.workdir_removed, result.ok)
        sys.exit(EXIT_OK if result.ok else EXIT_FAIL)
    if result.status == "run-failed":
        _print_failed_run(err_console, result.runs)
        err_console.print(f"[red]\\[detaudit] record failed: a run did not finish; {nothing}[/red]")
        _workdir_note(err_console, result.workdir, False, False)
        sys.exit(EXIT_FAIL)
    if result.status == "runner-mismatch":
        from detaudit.report import runner_mismatch_message

        message = runner_mismatch_message(result.runner_class or [], result.runs, nothing)
        err_console.print(f"[red]\\[detaudit] {escape(message)}[/red]")
        _workdir_note(err_console, result.workdir, False, False)
        sys.exit(EXIT_FAIL)
    assert result.report is not None
    if result.status == "disagree":
        print_diff(result.report, out_console, title=f"detaudit record {card}")
        _print_trace(out_console, result.trace)
        out_console.print(f"[red]\\[detaudit] runs disagree: {nothing}"
                          + (f" ({escape(str(result.standard_path))})" if result.standard_path else "") + "[/red]")
        _workdir_note(err_console, result.workdir, False, False)
        sys.exit(EXIT_FAIL)
    if result.status == "empty":
        excluded = len(result.report.excluded)
        out_console.print(f"[red]\\[detaudit] {nothing}: no metric series left to compare ({excluded} excluded: "
                          f"{escape(', '.join(sorted(result.report.excluded)[:10]))}); a standard with 0 series "
                          "would pass any run. Use --include GLOB or the card's include to compare them.[/red]")
        _workdir_note(err_console, result.workdir, False, False)
        sys.exit(EXIT_FAIL)
    n_identical = len(result.report.identical)
    excluded = len(result.report.excluded)
    if result.status == "agreed":
        _print_trace(out_console, result.trace)
        out_console.print(f"[green]\\[detaudit] AGREE: {n_identical} metric series identical across {runs} runs; "
                          f"nothing written (--no-write)[/green]" + (f" ({excluded} excluded)" if excluded else ""))
        _workdir_note(err_console, result.workdir, result.workdir_removed, True)
        return
    n = len(result.standard.series) if result.standard else 0
    if result.dropped:
        out_console.print(f"[yellow]\\[detaudit] --allow-partial: dropped {len(result.dropped)} disagreeing series:[/yellow]")
        for name, info in sorted(result.dropped.items()):
            out_console.print(f"  {escape(name)} ({info['kind']})")
    for name in result.nan_dropped:
        out_console.print(f"[yellow]\\[detaudit] --drop-nan-series: dropped {escape(name)} (holds NaN)[/yellow]")
    if result.review is not None:  # what `detaudit standard diff OLD NEW` prints
        for line in review_lines(result.review):
            out_console.print(f"\\[detaudit] update: {escape(line)}")
    _print_trace(out_console, result.trace)
    if result.standard_trace is not None:
        out_console.print(f"\\[detaudit] run 1's trace saved with the standard: {escape(str(result.standard_trace))} "
                          "(verify traces its run and compares it with this one)")
    if result.stale_trace_removed is not None:
        out_console.print(f"\\[detaudit] removed {escape(str(result.stale_trace_removed))}: the replaced standard's "
                          "trace (record with --trace to keep one)")
    out_console.print(
        f"[green]\\[detaudit] RECORDED: {n} metric series identical across {runs} runs -> {escape(str(result.standard_path))}[/green]"
        + (f" ({excluded} excluded series listed in the file)" if excluded else "")
    )
    _workdir_note(err_console, result.workdir, result.workdir_removed, True)


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--metrics", type=click.Path(dir_okay=False, path_type=Path), help="Verify this metrics JSONL instead of running CARD.")
@click.option("--standard", type=click.Path(dir_okay=False, path_type=Path), help="Standard file, any format (detected); default: from CARD and the runner class.")
@click.option("--allow-other-runner", is_flag=True, help="Exit 0 (SKIPPED), not 1 (NOT VERIFIED), when the only standard is for another runner class.")
@click.option("--strict-runner", is_flag=True, help="Exit 1 when the runner class differs from the standard's (the default; kept for old scripts).")
@click.option("--step-key", help="Step field for lines without a step_key.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Where the run dir goes; it must be empty (default: a new temp dir, removed when the run passed).")
@click.option("--cluster", metavar="ADDRESS", help="Run the run as a Ray job on this cluster (http://HEAD:8265, or auto).")
@click.option("--suite", metavar="NAME", help="Verify every card of suite NAME (cards in --cards): one table, one exit code.")
@click.option("--cards", type=click.Path(file_okay=False, path_type=Path), default=Path("recipes"), show_default=True,
              help="Folder of cards for --suite.")
@click.option("--junit-xml", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a JUnit XML report: one testcase per series (per card with --suite).")
@click.option("--trace", type=click.Choice(["rng", "modules"]), is_flag=False, flag_value="rng", default=None,
              help="Trace every global-RNG draw in every process of the run(s) (--trace=modules: and every nn.Module call); name the first that differs.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object on stdout (failing series, environment differences, the trace report).")
@handle_errors
def verify(card: Path | None, extra_args: tuple[str, ...], metrics: Path | None, standard: Path | None,
           allow_other_runner: bool, strict_runner: bool, step_key: str | None, workdir: Path | None,
           cluster: str | None, suite: str | None, cards: Path, junit_xml: Path | None, trace: str | None,
           as_json: bool) -> None:
    """Check one run of CARD (or --metrics RUN.jsonl) against its standard, exactly.

    CARD defaults to the embedded tiny CPU recipe when neither CARD nor --metrics is given.
    Reads standards in any format, detected from the content (detaudit, miles, Megatron-LM,
    TorchTitan, NeMo-RL). Exit 0 on PASSED (or PASSED (approximate) for a runner class the
    card gives tolerances, or SKIPPED with --allow-other-runner), 1 on a mismatch, a failed run, or NOT VERIFIED (no standard for
    this runner class, or one with no series), 2 on bad input.
    """
    from detaudit.report import divergence_line
    from detaudit.flows.verify import verify as run_verify

    if strict_runner and allow_other_runner:
        raise click.UsageError("--strict-runner and --allow-other-runner contradict each other")
    if suite is not None:
        if card is not None or metrics is not None or standard is not None or extra_args or workdir is not None or cluster \
                or trace or as_json:
            raise click.UsageError("--suite verifies the suite's cards: it takes no CARD, --metrics, --standard, --workdir, "
                                   "--cluster, --trace, --json or extra args (--junit-xml gives one report)")
        _verify_suite(suite, cards, allow_other_runner, junit_xml)
    if card is None and metrics is None:
        card = default_card()
    out_console, err_console = _stdout(), _stderr()
    display = RunDisplay(err_console, 1, f"detaudit verify {card}")
    try:
        with display:
            result = run_verify(card, metrics=metrics, standard=standard, allow_other_runner=allow_other_runner,
                                step_key=step_key, extra_args=extra_args, workdir=workdir, cluster=cluster,
                                on_update=display.update, trace=trace)
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "not verified")
    from detaudit.ci import cases_from_verify
    from detaudit.report import SUITE_STATUS, status_detail

    label = card.stem if card is not None else Path(str(metrics)).stem
    _ci_reports(junit_xml, f"detaudit verify {card or metrics}",
                cases_from_verify(result, f"detaudit.flows.verify.{label}", time_s=result.run.elapsed if result.run else 0.0),
                f"{SUITE_STATUS.get(result.status, result.status)}: {status_detail(result.status, result)} ({result.standard_path})")
    if metrics is None:
        _warn_est_time(err_console, card, [result.run])
    path = escape(str(result.standard_path))
    here = "-".join(result.runner_here or [])
    if result.run is not None:
        _print_jobs(err_console, [result.run])
    if result.standard_trace is not None:
        err_console.print(f"\\[detaudit] the standard carries a trace ({escape(str(result.standard_trace))}): this run "
                          "was traced and compared with it")
    if as_json:
        from detaudit.report import dump_json, verify_document

        if result.status == "run-failed" and result.run is not None:
            _print_failed_run(err_console, [result.run])
        click.echo(dump_json(verify_document(result, str(card) if card is not None else None)))
        if result.workdir is not None:
            _workdir_note(err_console, result.workdir, result.workdir_removed, result.ok)
        sys.exit(EXIT_OK if result.ok else EXIT_FAIL)
    if result.status == "runner-mismatch":
        from detaudit.report import runner_mismatch_message

        message = runner_mismatch_message(result.runner_here or [], [result.run], "not verified")
        out_console.print(f"[red]\\[detaudit] NOT VERIFIED: {escape(message)}[/red]")
        sys.exit(EXIT_FAIL)
    if result.status in ("skipped", "not-verified"):
        others = ", ".join(sorted({"-".join(c) for c in result.other_classes})) or "-".join(result.runner_standard or [])
        if result.status == "skipped":
            out_console.print(f"[yellow]\\[detaudit] SKIPPED: no standard for runner class {here} (standards exist for "
                              f"{escape(others)}: {path}); bitwise agreement is only promised on the class a standard "
                              "was recorded on (--allow-other-runner)[/yellow]")
            sys.exit(EXIT_OK)
        out_console.print(f"[red]\\[detaudit] NOT VERIFIED: no standard for runner class {here} (standards exist for "
                          f"{escape(others)}: {path}); record one on this class, or pass --allow-other-runner to "
                          "exit 0[/red]")
        sys.exit(EXIT_FAIL)
    if result.status == "empty-standard":
        out_console.print(f"[red]\\[detaudit] NOT VERIFIED: the standard {path} has no metric series, so it "
                          "proves nothing; re-record it with series to compare[/red]")
        sys.exit(EXIT_FAIL)
    if result.status == "run-failed":
        assert result.run is not None
        _print_failed_run(err_console, [result.run])
        out_console.print("[red]\\[detaudit] FAILED: the run did not finish[/red]")
        _workdir_note(err_console, result.workdir, False, False)
        sys.exit(EXIT_FAIL)
    if result.status == "approximate":
        from detaudit.report import approximate_line

        _print_trace(out_console, result.trace)
        out_console.print(f"[yellow]\\[detaudit] PASSED (approximate, not identical): {escape(approximate_line(result))} "
                          f"({path})[/yellow]")
        _workdir_note(err_console, result.workdir, result.workdir_removed, True)
        sys.exit(EXIT_OK)
    if result.status == "passed":
        _print_trace(out_console, result.trace)
        out_console.print(f"[green]\\[detaudit] PASSED: {result.compared} metric series match {path}[/green]")
        if result.extra_series:
            out_console.print(f"\\[detaudit] note: {len(result.extra_series)} series not in the standard: "
                              + escape(", ".join(result.extra_series[:20])))
        if result.package_changes:
            err_console.print(f"[yellow]detaudit: warning: the bits match, but {len(result.package_changes)} package "
                              "version(s) differ from the standard's: " + escape("; ".join(result.package_changes)) + "[/yellow]")
        _workdir_note(err_console, result.workdir, result.workdir_removed, True)
        sys.exit(EXIT_OK)
    out_console.print(f"[red]\\[detaudit] FAILED: {len(result.failures)} of {result.compared} metric series differ from {path}[/red]")
    for name, d in result.failures:
        out_console.print("  " + escape(divergence_line(name, d)))
    _print_trace(out_console, result.trace)
    if result.provenance:
        out_console.print("[yellow]\\[detaudit] this environment differs from the standard's:[/yellow]")
        for line in result.provenance:
            out_console.print("  " + escape(line))
    _workdir_note(err_console, result.workdir, result.workdir_removed, False)
    sys.exit(EXIT_FAIL)


def _verify_suite(suite: str, cards_dir: Path, allow_other_runner: bool, junit_xml: Path | None) -> None:
    from detaudit.ci import cases_from_suite
    from detaudit.report import est_time_warning, print_suite
    from detaudit.flows.suite import find_cards, over_estimate, verify_suite

    out_console, err_console = _stdout(), _stderr()
    found = find_cards(cards_dir, suite)
    total = len(found)

    def on_card(card: Any) -> None:
        index = found.index(card) + 1
        err_console.print(f"\\[detaudit] suite {escape(suite)}: card {index}/{total} {escape(card.name)} ({escape(str(card.path))})")

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
            err_console.print(f"[yellow]\\[detaudit] warning: {escape(est_time_warning(o.card.name, o.card.est_time, run_time))}[/yellow]")
    passed = sum(1 for o in result.outcomes if o.status == "passed")
    _ci_reports(junit_xml, f"detaudit verify --suite {suite}", cases_from_suite(result),
                f"{passed} of {len(result.outcomes)} cards passed")
    sys.exit(result.exit_code)


@main.command("plan")
@click.option("--suite", metavar="NAME", help="Only the cards of this suite (default: every card).")
@click.option("--cards", type=click.Path(file_okay=False, path_type=Path), default=Path("recipes"), show_default=True,
              help="Folder of cards (*.toml).")
@click.option("--budget", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Exit 1 when the suite's total est_time exceeds SECONDS (or a card has no est_time).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@handle_errors
def plan(suite: str | None, cards: Path, budget: float | None, as_json: bool) -> None:
    """List cards with est_time, GPUs and the suite total; check it against a CI time budget.

    Exit 0 within the budget (or without one), 1 over it, 2 on bad input.
    """
    import json

    from detaudit.report import plan_document, print_plan
    from detaudit.flows.suite import plan_suite

    result = plan_suite(cards, suite, budget)
    if as_json:
        click.echo(json.dumps(plan_document(result), indent=2, sort_keys=True))
    else:
        print_plan(result, _stdout())
    sys.exit(EXIT_FAIL if result.fits is False else EXIT_OK)


@main.command()
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seed", default=1234, show_default=True, type=int, help="Seed the probe expects each process to be seeded with.")
@click.option("--no-ray", is_flag=True, help="Skip the Ray worker probe.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@handle_errors
def doctor(card: Path | None, seed: int, no_ray: bool, as_json: bool) -> None:
    """Determinism preflight for each process of CARD's run, Ray workers included.

    Checks deterministic algorithms, CUBLAS_WORKSPACE_CONFIG, cuDNN flags, TF32, NCCL_ALGO,
    PYTHONHASHSEED, the allowed SDPA backends and per-process seeds, in the process as the
    card's environment starts it, in the driver after determinism.enable(seed), and in a Ray
    worker started through determinism.ray_runtime_env(seed). Exit 0 all pass, 1 any fails.
    """
    import json
    from dataclasses import asdict

    from detaudit.data.card import load_card
    from detaudit.env.doctor import run_doctor
    from detaudit.report import print_doctor

    rows = run_doctor(load_card(card or default_card()), seed=seed, ray=not no_ray)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows], indent=2, sort_keys=True))
    else:
        print_doctor(rows, _stdout())
    sys.exit(EXIT_OK if all(r.ok for r in rows) else EXIT_FAIL)


# --- standard: convert / diff / show ---------------------------------------------------------

STANDARD_FORMATS = ("detaudit", "miles", "megatron", "torchtitan", "nemo")


@main.group("standard")
def standard_group() -> None:
    """Review and convert standard files (detaudit, miles, Megatron-LM, TorchTitan, NeMo-RL)."""


@standard_group.command("convert")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(STANDARD_FORMATS), required=True, help="Format of DEST.")
@click.option("--series", metavar="NAME", help="Write only this series (TorchTitan files hold one).")
@click.option("--drop-nan-series", is_flag=True, help="Leave out every series holding a NaN, naming each (miles meta lists them).")
@click.option("--overwrite", is_flag=True, help="Replace DEST if it exists.")
@handle_errors
def standard_convert(source: Path, dest: Path, fmt: str, series: str | None, drop_nan_series: bool, overwrite: bool) -> None:
    """Convert a standard to another format, exactly (the source format is detected).

    Exit 2, writing nothing, where the target format cannot hold a value bit for bit.
    """
    from detaudit.standards.formats import drop_nan_series as drop_nan, load_any, write_as

    std = load_any(source)
    dropped = drop_nan(std) if drop_nan_series else []
    for name in dropped:
        click.echo(f"detaudit: dropped {name} (holds NaN)", err=True)
    write_as(dest, std, fmt, overwrite=overwrite, series=series)
    n = 1 if series or fmt == "torchtitan" else len(std.series)
    click.echo(f"detaudit: converted {source} ({std.format}) -> {dest} ({fmt}), {n} series")


@standard_group.command("diff")
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the review as one JSON object.")
@handle_errors
def standard_diff(old: Path, new: Path, as_json: bool) -> None:
    """Review a change to a standard: per series added/removed, first differing step, max abs/rel
    difference, ULPs, and steps added or removed. Any two formats.

    Exit 0 when every series is identical, 1 when any changed, 2 on bad input.
    """
    from detaudit.standards.formats import load_any
    from detaudit.report import print_review, review_json
    from detaudit.standards.diff import diff_standards

    result = diff_standards(load_any(old), load_any(new), old_label=str(old), new_label=str(new))
    if as_json:
        click.echo(review_json(result))
    else:
        print_review(result, _stdout())
    sys.exit(EXIT_OK if result.identical else EXIT_FAIL)


@standard_group.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def standard_show(path: Path, as_json: bool) -> None:
    """Summarise a standard: format, runner class, how it was recorded, and per series its step key,
    points, step range, value types and NaN count."""
    import json

    from detaudit.standards.formats import load_any
    from detaudit.report import print_standard_summary, standard_summary

    std = load_any(path)
    if as_json:
        click.echo(json.dumps(standard_summary(std), indent=2, sort_keys=True, allow_nan=False, default=str))
    else:
        print_standard_summary(std, _stdout())


# --- env -----------------------------------------------------------------------------------


@main.command("env")
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the probe and the runner class as one JSON object.")
@handle_errors
def env_command(card: Path | None, as_json: bool) -> None:
    """Show the runner class and the environment a run of CARD would record.

    The probe runs in the recipe's interpreter with the card's environment, exactly as
    record and verify do. CARD defaults to the embedded tiny CPU recipe.
    """
    from detaudit.data.card import load_card
    from detaudit.run.plan import environment_for, resolve_runner
    from detaudit.report import environment_json, print_environment

    loaded = load_card(card or default_card())
    info = environment_for(loaded)
    cls = resolve_runner(loaded, info)
    if as_json:
        click.echo(environment_json(cls, info))
    else:
        print_environment(cls, info, _stdout())


# --- health ------------------------------------------------------------------------------


@main.command()
@click.argument("metrics", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--metric", required=True, help="Series to judge, e.g. rollout/reward/raw_mean.")
@click.option("--window", default=20, show_default=True, type=click.IntRange(min=1), help="Points in the first/last means.")
@click.option("--buckets", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--worst", default=5, show_default=True, type=click.IntRange(min=0), help="Worst single-step drops to list.")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), help="Plot file (default: next to METRICS).")
@click.option("--no-png", is_flag=True, help="Do not write the plot.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--step-key", help="Step field for lines without a step_key.")
@handle_errors
def health(metrics: Path, metric: str, window: int, buckets: int, worst: int, png: Path | None, no_png: bool,
           as_json: bool, step_key: str | None) -> None:
    """Curve health of one series: first/last means, bucket means, worst drops, a PNG plot."""
    from detaudit.data.values import format_value
    from detaudit.data.health import curve_health, plot

    report = curve_health(metrics, metric, window=window, buckets=buckets, worst=worst, step_key=step_key)
    written = None
    if not no_png:
        written = plot(report, png or metrics.with_name(f"{metrics.stem}.{metric.replace('/', '_')}.png"))
    if as_json:
        from detaudit.report import dump_json

        doc = report.to_json()
        doc["png"] = str(written) if written else None
        click.echo(dump_json(doc))
        return
    con = _stdout()
    w = report.window
    con.print(f"[bold]{escape(metric)}[/bold] in {escape(str(metrics))}: {len(report.values)} points"
              + (f" ({report.skipped} NaN/non-numeric left out)" if report.skipped else ""))
    con.print(f"mean of first {w}: {report.first_mean:.6g}   mean of last {w}: {report.last_mean:.6g}   "
              f"delta: {report.delta:+.6g}")
    table = Table(header_style="bold", title="bucket means", title_justify="left")
    for col in ("steps", "mean"):
        table.add_column(col, justify="right")
    for first, last, mean in report.buckets:
        table.add_row(f"{format_value(first)}-{format_value(last)}", f"{mean:.6g}")
    con.print(table)
    if report.drops:
        drops = Table(header_style="bold", title="worst single-step drops", title_justify="left")
        for col in ("step", "before", "value", "drop", "recovers next point"):
            drops.add_column(col, justify="right")
        for d in report.drops:
            rec = "-" if d.recovered is None else ("yes" if d.recovered else "no")
            drops.add_row(format_value(d.step), f"{d.before:.6g}", f"{d.value:.6g}", f"{d.size:.4g}", rec)
        con.print(drops)
    if written:
        con.print(f"plot: {escape(str(written))}")


# --- scan-rng ------------------------------------------------------------------------------

SEVERITY_RANK = {"warning": 1, "error": 2, "never": 3}


@main.command("scan-rng")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(["error", "warning", "never"]), default="error", show_default=True,
              help="Lowest severity that makes the exit code 1.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), help="Ignore findings recorded in this file.")
@click.option("--write-baseline", type=click.Path(dir_okay=False, path_type=Path), help="Record every current finding here.")
@click.option("--select", multiple=True, metavar="RULE", help="Only these rules (prefixes, e.g. DA1).")
@click.option("--ignore", multiple=True, metavar="RULE", help="Leave out these rules (prefixes).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="pyproject.toml with [tool.detaudit] (default: found upward).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the caches (per-file facts, whole results).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parser processes (default: CPU count).")
@click.option("--unknown-process", type=click.Choice(["error", "warning"]), default="error", show_default=True,
              help="Severity of a draw that no entry point in the tree can be shown to run (warning: library trees).")
@click.option("--force-exclude", is_flag=True, help="Apply [tool.detaudit] exclude to the PATHs named here too.")
@click.option("--tests-as-pipeline", is_flag=True,
              help="Judge pytest tests as pipeline processes: an unseeded draw only a test runs is an error (default: a warning).")
@click.option("--explain", metavar="RULE", help="Print what RULE finds, why it breaks reproducibility, and the fix.")
@handle_errors
def scan_rng(paths: tuple[Path, ...], fmt: str, fail_on: str, baseline: Path | None, write_baseline: Path | None,
             select: tuple[str, ...], ignore: tuple[str, ...], config: Path | None, no_cache: bool, jobs: int | None,
             unknown_process: str, force_exclude: bool, tests_as_pipeline: bool, explain: str | None) -> None:
    """Find draws from process-global RNGs (torch, numpy, random) and the processes that run them unseeded.

    Static: files are parsed, never imported. Exit 0 when no finding reaches --fail-on, 1 when
    one does, 2 on usage errors. Suppress a line with `# detaudit: ignore[DA101]`.
    """
    from dataclasses import replace

    from detaudit.scan import ScanConfig, apply_baseline, scan
    from detaudit.scan import output
    from detaudit.scan.rules import RULE_BY_CODE

    if explain is not None:
        code = explain.strip().upper()
        if code not in RULE_BY_CODE:
            raise InputError(None, f"--explain {explain}: unknown rule (known: {', '.join(RULE_BY_CODE)})")
        click.echo(output.explain(code), nl=False)
        return
    if not paths:
        raise InputError(None, "scan-rng: give at least one PATH (or --explain RULE)")
    cfg = ScanConfig.load(config)
    cfg = replace(cfg, unknown_process=unknown_process, force_exclude=force_exclude,
                  tests_as_pipeline=tests_as_pipeline or cfg.tests_as_pipeline)
    if select or ignore:
        cfg = replace(cfg, select=select or cfg.select, ignore=cfg.ignore + ignore)
    result = scan(list(paths), cfg, use_cache=not no_cache, jobs=jobs)
    if write_baseline is not None:
        from detaudit.scan import write_baseline as save

        save(write_baseline, result.findings)
        click.echo(f"detaudit: wrote {len(result.findings)} findings to baseline {write_baseline}", err=True)
    dropped = 0
    if baseline is not None:
        result.findings, dropped = apply_baseline(baseline, result.findings)
    if fmt != "text":  # skipped files and notes are part of the answer in every format
        for line in output.notices(result):
            click.echo(line, err=True)
    if fmt == "json":
        click.echo(output.as_json(result))
    elif fmt == "sarif":
        click.echo(output.as_sarif(result))
    elif fmt == "github":
        text = output.as_github(result)
        if text:
            click.echo(text)
    else:
        output.print_text(result, _stdout())
        if dropped:
            click.echo(f"({dropped} findings in the baseline not shown)")
    worst = max((SEVERITY_RANK[f.severity] for f in result.findings), default=0)
    sys.exit(EXIT_FAIL if worst >= SEVERITY_RANK[fail_on] else EXIT_OK)


# --- trace -------------------------------------------------------------------------------------


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--modules", "modules", is_flag=True, help="Also fingerprint every nn.Module call's inputs and outputs.")
@click.option("--save", type=click.Path(file_okay=False, path_type=Path), help="Save the trace to this new folder (for --against on another machine).")
@click.option("--against", type=click.Path(file_okay=False, path_type=Path), help="Compare with a trace saved by --save; name the first differing draw or module.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary (and comparison) as one JSON object.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Where the run dir goes (default: a new temp dir).")
@handle_errors
def trace(card: Path | None, extra_args: tuple[str, ...], modules: bool, save: Path | None, against: Path | None,
          as_json: bool, workdir: Path | None) -> None:
    """Run CARD once with every global-RNG draw traced, in every process; summarise per process.

    Per process (main, Ray actors and tasks, multiprocessing children): draws per generator,
    where it seeded, and draws from generators it never seeded; seed collisions between
    replicas. --against DIR names the first draw or module that differs from a saved trace.
    Exit 0 on success (and identical traces with --against), 1 when the run fails or the
    traces differ, 2 on bad input.
    """
    import json

    from detaudit.trace.report import print_comparison, print_summary, trace_json
    from detaudit.flows.trace import trace_card

    card = card or default_card()
    out_console, err_console = _stdout(), _stderr()
    display = RunDisplay(err_console, 1, f"detaudit trace {card}")
    try:
        with display:
            result = trace_card(card, mode="modules" if modules else None, extra_args=extra_args, workdir=workdir,
                                save=save, against=against, on_update=display.update)
    except KeyboardInterrupt as exc:
        _interrupted(err_console, exc, "no trace saved")
    if result.status == "run-failed":
        _print_failed_run(err_console, [result.run])
        out_console.print("[red]\\[detaudit] trace failed: the run did not finish[/red]")
        sys.exit(EXIT_FAIL)
    assert result.trace is not None
    if as_json:
        doc = trace_json(result.trace, result.unseeded, result.collisions, result.comparison)
        doc["saved"] = str(result.saved) if result.saved else None
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print_summary(out_console, result.trace, result.unseeded, result.collisions)
        if result.comparison is not None:
            print_comparison(out_console, result.comparison)
        if result.saved is not None:
            out_console.print(f"\\[detaudit] trace saved to {escape(str(result.saved))} ({result.mode})")
    sys.exit(EXIT_OK if result.ok else EXIT_FAIL)


if __name__ == "__main__":  # pragma: no cover
    main()
