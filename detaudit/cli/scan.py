"""``detaudit scan-rng``: the static scan for global-RNG draws and their processes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from detaudit.cli.base import EXIT_FAIL, EXIT_OK, handle_errors
from detaudit.errors import InputError
from detaudit.render.console import console

SEVERITY_RANK = {"warning": 1, "error": 2, "never": 3}


@click.command("scan-rng")
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
@click.option("--unknown-process", type=click.Choice(["loaded", "error", "warning"]), default="loaded", show_default=True,
              help="Severity of a draw that no entry point in the tree can be shown to run: loaded: an error when a "
                   "pipeline process imports its module and code other than tests names its function, else a warning; "
                   "error: always (strict); warning: never (library trees).")
@click.option("--force-exclude", is_flag=True, help="Apply [tool.detaudit] exclude to the PATHs named here too.")
@click.option("--tests-as-pipeline", is_flag=True,
              help="Judge pytest tests, and __main__ blocks outside the pipeline (a module's self-test block, a "
                   "stand-alone tool), as pipeline processes: an unseeded draw only they run is an error (default: a "
                   "warning).")
@click.option("--explain", metavar="RULE", help="Print what RULE finds, why it breaks reproducibility, and the fix.")
@handle_errors
def scan_rng(paths: tuple[Path, ...], fmt: str, fail_on: str, baseline: Path | None, write_baseline: Path | None,
             select: tuple[str, ...], ignore: tuple[str, ...], config: Path | None, no_cache: bool, jobs: int | None,
             unknown_process: str, force_exclude: bool, tests_as_pipeline: bool, explain: str | None) -> None:
    """Find draws from process-global RNGs (torch, numpy, random) and the processes that run them unseeded.

    Static: files are parsed, never imported. Exit 0 when no finding reaches --fail-on, 1 when
    one does, 2 on usage errors. Suppress a line with `# detaudit: ignore[DA101]`.

    \b
    Examples:
      detaudit scan-rng src/ --format github           # annotations in a GitHub job
      detaudit scan-rng src/ --write-baseline .detaudit-baseline.json
      detaudit scan-rng --explain DA101
    """
    from dataclasses import replace

    from detaudit.scan import ScanConfig, apply_baseline, output, scan
    from detaudit.scan.rules import RULE_BY_CODE

    if explain is not None:
        code = explain.strip().upper()
        if code not in RULE_BY_CODE:
            raise InputError(None, f"--explain {explain}: unknown rule (known: {', '.join(RULE_BY_CODE)})")
        click.echo(output.explain(code), nl=False)
        return
    if not paths:
        raise InputError(None, "scan-rng: give at least one PATH (or --explain RULE)")
    if write_baseline is not None:  # checked before the scan: not an input, not a device or a folder, writable
        from detaudit.fileio import OutputPaths

        outputs = OutputPaths()
        for path, what in [(p, "a path it scans") for p in paths] + [(baseline, "--baseline"), (config, "--config")]:
            outputs.reads(path, what)
        outputs.writes(write_baseline, "--write-baseline")
        outputs.check()
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
        output.print_text(result, console())
        if dropped:
            click.echo(f"({dropped} findings in the baseline not shown)")
    worst = max((SEVERITY_RANK[f.severity] for f in result.findings), default=0)
    sys.exit(EXIT_FAIL if worst >= SEVERITY_RANK[fail_on] else EXIT_OK)
