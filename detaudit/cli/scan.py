"""``detaudit scan-rng``: the static scan for global-RNG draws and their processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from detaudit.cli.base import EXIT_FAIL, EXIT_OK, ci_title, handle_errors, warn
from detaudit.cli.options import junit_option
from detaudit.errors import InputError
from detaudit.render.console import console

if TYPE_CHECKING:
    from detaudit.render.ci.cases import Case
    from detaudit.scan.findings import Finding

FAIL_ON = ("error", "unproven", "warning", "never")  # --fail-on, the most severe first


@click.command("scan-rng")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
              help="Lowest verdict that makes the exit code 1 (error > unproven > warning). With --baseline, a new "
                   "unproven finding always does.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path),
              help="Hide the findings recorded in this file (same place, function, processes, and a verdict at "
                   "least as severe); report only new ones.")
@click.option("--write-baseline", type=click.Path(dir_okay=False, path_type=Path),
              help="Record every current finding (with its verdict and processes) here.")
@click.option("--select", multiple=True, metavar="RULE", help="Only these rules (prefixes, e.g. DA1).")
@click.option("--ignore", multiple=True, metavar="RULE", help="Leave out these rules (prefixes).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="pyproject.toml with [tool.detaudit] (default: found upward).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the caches (per-file facts, whole results).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parser processes (default: CPU count).")
@click.option("--unknown-process", type=click.Choice(["loaded", "error", "warning"]), default="loaded", show_default=True,
              help="Verdict of a draw that no entry point in the tree can be shown to run: loaded: unproven when a "
                   "pipeline process imports its module and code other than tests names its function, else a warning; "
                   "error: an error always (strict); warning: a warning always (library trees).")
@click.option("--force-exclude", is_flag=True, help="Apply [tool.detaudit] exclude to the PATHs named here too.")
@click.option("--tests-as-pipeline", is_flag=True,
              help="Judge pytest tests, and __main__ blocks outside the pipeline (a module's self-test block, a "
                   "stand-alone tool), as pipeline processes: an unseeded draw only they run is an error (default: a "
                   "warning).")
@click.option("--explain", metavar="RULE", help="Print what RULE finds, why it breaks reproducibility, and the fix.")
@junit_option("one case per finding: an error fails, an unproven finding is skipped unless it fails the gate")
@handle_errors
def scan_rng(paths: tuple[Path, ...], fmt: str, fail_on: str, baseline: Path | None, write_baseline: Path | None,
             select: tuple[str, ...], ignore: tuple[str, ...], config: Path | None, no_cache: bool, jobs: int | None,
             unknown_process: str, force_exclude: bool, tests_as_pipeline: bool, explain: str | None,
             junit_xml: Path | None) -> None:
    """Find draws from process-global RNGs (torch, numpy, random) and the processes that run them unseeded.

    Static: files are parsed, never imported. Each finding is an error (an unseeded pipeline
    process runs it), unproven (the scan cannot tell: no known process, or seeding through a call
    it cannot resolve) or a warning. Exit 1 when a finding reaches --fail-on (default: error) or,
    with --baseline, when a new finding is unproven; 0 otherwise; 2 on usage errors. Suppress a
    line with `# detaudit: ignore[DA101]`.

    \b
    Examples:
      detaudit scan-rng src/ --format github           # annotations in a GitHub job
      detaudit scan-rng src/ --write-baseline .detaudit-baseline.json
      detaudit scan-rng --explain DA101
    """
    from dataclasses import replace

    from detaudit.render import scan as output
    from detaudit.scan import ScanConfig, apply_baseline, scan
    from detaudit.scan.rules import RULE_BY_CODE

    if explain is not None:
        code = explain.strip().upper()
        if code not in RULE_BY_CODE:
            raise InputError(None, f"--explain {explain}: unknown rule (known: {', '.join(RULE_BY_CODE)})")
        click.echo(output.explain(code), nl=False)
        return
    if not paths:
        raise InputError(None, "scan-rng: give at least one PATH (or --explain RULE)")
    from detaudit.render.ci import step_summary_path

    summary = step_summary_path()  # GITHUB_STEP_SUMMARY: appended to, so checked with the other outputs
    if write_baseline is not None or junit_xml is not None or summary is not None:
        _check_outputs(paths, baseline, config, write_baseline, junit_xml, summary)
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
    failing = _failing(result.findings, fail_on, baseline is not None)
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
        output.print_text(result, console())
        if dropped:
            click.echo(f"({dropped} findings in the baseline not shown; every finding shown is new)")
    if junit_xml is not None or summary is not None:  # no report asked for: no case builders imported
        from detaudit.render.ci import write_ci_reports

        verdict = "FAILED" if failing else "PASSED"
        detail = output.counts_text(result.findings) + (f"; {dropped} in the baseline" if dropped else "")
        for text in write_ci_reports(junit_xml, ci_title(click.get_current_context()), _cases(result.findings, failing),
                                     verdict, detail, summary):
            warn(text)
    sys.exit(EXIT_FAIL if failing else EXIT_OK)


def _check_outputs(paths: tuple[Path, ...], baseline: Path | None, config: Path | None, write_baseline: Path | None,
                   junit_xml: Path | None, summary: Path | None) -> None:
    """Before the scan: no report (nor the step summary) is a file the scan reads (a named path, a Python or config
    file below a named folder, --baseline, --config), nor the other report, a device, a FIFO or a folder."""
    from detaudit.fileio import OutputPaths
    from detaudit.render.ci import claim_ci_paths
    from detaudit.scan.baseline import is_baseline
    from detaudit.scan.files import CONFIG_SUFFIXES

    outputs = OutputPaths()
    for path in paths:
        outputs.reads(path, "a path it scans")
        # Python files, and the config files the scan reads for names (a baseline written before is no input)
        outputs.reads_below(path, f"the scan of {path}", (".py", *CONFIG_SUFFIXES), written_here=is_baseline)
    outputs.reads(baseline, "--baseline")
    outputs.reads(config, "--config")
    outputs.writes(write_baseline, "--write-baseline")
    claim_ci_paths(outputs, junit_xml, summary)
    outputs.check()


def _failing(findings: list[Finding], fail_on: str, against_baseline: bool) -> list[Finding]:
    """The findings that make the exit code 1: those at least as severe as ``fail_on``, and, against
    a baseline (every finding left is new), the unproven ones too; none with ``never``."""
    if fail_on == "never":
        return []
    lowest = FAIL_ON.index(fail_on)
    return [f for f in findings if FAIL_ON.index(f.severity) <= lowest
            or (against_baseline and f.severity == "unproven")]


def _cases(findings: list[Finding], failing: list[Finding]) -> list[Case]:
    """One CI case per finding: failed when it fails the gate, skipped when unproven (the scan could
    not tell), passed otherwise (a warning); one passed case when there is no finding."""
    from detaudit.render.ci.cases import Case

    failed = {id(f) for f in failing}
    cases = []
    for f in findings:
        status = "failed" if id(f) in failed else "skipped" if f.severity == "unproven" else "passed"
        message = f"{f.severity}: {f.message}; {f.note}"
        cases.append(Case("detaudit.scan-rng", f"{f.path}:{f.line} {f.rule}", status, 0.0, message,
                          f"{message}\n{f.code}"))
    return cases or [Case("detaudit.scan-rng", "no findings", "passed")]
