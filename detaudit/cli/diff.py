"""``detaudit diff``: compare metrics files exactly."""

from __future__ import annotations

from pathlib import Path

import click

from detaudit.cli.base import exit_with, handle_errors
from detaudit.cli.options import exclude_include, step_key_option
from detaudit.cli.outputs import Reports, emit_outcome, html_options
from detaudit.render.console import console


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@step_key_option("Step field for lines without a step_key (default: detected, else the line index).")
@exclude_include
@html_options(scan=False)
@handle_errors
def diff(runs: tuple[Path, ...], as_json: bool, step_key: str | None, exclude: tuple[str, ...], include: tuple[str, ...],
         html: Path | None, overwrite_html: bool) -> None:
    """Compare metrics JSONL files exactly; each run against the first.

    Exit 0 when every compared series is identical, 1 when any differ, 2 on bad input or when
    nothing is left to compare (every series left out, or files holding only steps).

    Steps: a line's `step_key` field, else --step-key, else the first of step, iteration,
    global_step, _step, epoch it holds (detected, and said so), else the line number.

    \b
    Examples:
      detaudit diff run1/metrics.jsonl run2/metrics.jsonl
      detaudit diff a.jsonl b.jsonl c.jsonl --exclude 'debug/*' --json
    """
    from detaudit.data.compare import diff_runs, require_compared
    from detaudit.data.exclusion import Exclusion
    from detaudit.data.metrics import read_metrics_many
    from detaudit.flows.results import DiffResult

    if len(runs) < 2:
        raise click.UsageError("diff needs at least two metrics files")
    reports = Reports("detaudit diff", as_json=as_json, html=html, overwrite_html=overwrite_html)
    reports.prepare((path, "a metrics file it compares") for path in runs)
    exclusion = Exclusion(cli=exclude, include=include)
    parsed = read_metrics_many(runs, default_step_key=step_key, exclusion=exclusion)
    report = diff_runs(parsed, labels=[str(p) for p in runs])
    report.exclude_patterns = exclusion.patterns()
    require_compared(report, parsed)
    emit_outcome(DiffResult(report, parsed), reports, console(), console(stderr=True))
    exit_with(report.ok)
