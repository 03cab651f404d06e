"""``detaudit standard convert | diff | show``: review and convert standard files."""

from __future__ import annotations

from pathlib import Path

import click

from detaudit.cli.base import exit_with, handle_errors
from detaudit.cli.outputs import Reports, emit_outcome, html_options
from detaudit.render.console import console
from detaudit.render.escapes import one_line
from detaudit.standards.formats.registry import FORMAT_NAMES


@click.group("standard")
def standard_group() -> None:
    """Review and convert standard files (detaudit, miles, Megatron-LM, TorchTitan, NeMo-RL).

    \b
    Examples:
      detaudit standard show standards/sd3_pickscore_nft.cpu-intel-6.207-avx512.json
      detaudit standard diff old.json new.json
      detaudit standard convert golden_values.json std.json --format detaudit
    """


@standard_group.command("convert")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMAT_NAMES), required=True, help="Format of DEST.")
@click.option("--series", metavar="NAME", help="Write only this series (TorchTitan files hold one).")
@click.option("--drop-nan-series", is_flag=True, help="Leave out every series holding a NaN, naming each (miles meta lists them).")
@click.option("--overwrite", is_flag=True, help="Replace DEST if it exists.")
@handle_errors
def standard_convert(source: Path, dest: Path, fmt: str, series: str | None, drop_nan_series: bool, overwrite: bool) -> None:
    """Convert a standard to another format, exactly (the source format is detected).

    Exit 2, writing nothing, where the target format cannot hold what the source holds (a value
    bit for bit, Megatron-LM's "nan" cells and headers, miles' meta, ...) or, converting a file
    to its own format or to detaudit, where its bytes would not come back.

    \b
    Examples:
      detaudit standard convert golden_values_dev.json std.json --format detaudit
      detaudit standard convert std.json golden.json --format megatron --overwrite
    """
    from detaudit.fileio import OutputPaths
    from detaudit.standards.formats import convert, load_any, write_conversion
    from detaudit.standards.formats import drop_nan_series as drop_nan

    paths = OutputPaths()
    paths.reads(source, "SOURCE")
    paths.writes(dest, "DEST", replace_flag="--overwrite", overwrite=overwrite)
    paths.check()
    std = load_any(source)
    dropped = drop_nan(std) if drop_nan_series else []
    for name in dropped:
        click.echo(one_line(f"detaudit: dropped {name} (holds NaN)"), err=True)
    conversion = convert(std, fmt, target=dest, series=series)
    write_conversion(dest, conversion, overwrite=overwrite)
    for note in conversion.notes:
        click.echo(one_line(f"detaudit: note: {note}"), err=True)
    n = 1 if series else len(std.series)
    click.echo(one_line(f"detaudit: converted {source} ({std.format}) -> {dest} ({fmt}), {n} series"))


@standard_group.command("diff")
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the review as one JSON object.")
@html_options(scan=False)
@handle_errors
def standard_diff(old: Path, new: Path, as_json: bool, html: Path | None, overwrite_html: bool) -> None:
    """Review a change to a standard: per series added/removed, first differing step, max abs/rel
    difference, ULPs, and steps added or removed. Any two formats.

    Exit 0 when every series is identical, 1 when any changed, 2 on bad input.

    \b
    Examples:
      git show HEAD:standards/sd3_pickscore_nft.cpu-intel-6.207-avx512.json > /tmp/old.json
      detaudit standard diff /tmp/old.json standards/sd3_pickscore_nft.cpu-intel-6.207-avx512.json
    """
    from detaudit.flows.results import ReviewResult
    from detaudit.standards.diff import diff_standards, require_series
    from detaudit.standards.formats import load_any

    reports = Reports(f"detaudit standard diff {old} {new}", as_json=as_json, html=html, overwrite_html=overwrite_html)
    reports.prepare([(old, "OLD"), (new, "NEW")])
    old_std, new_std = load_any(old), load_any(new)
    require_series(old_std, new_std, str(old), str(new))
    result = diff_standards(old_std, new_std, old_label=str(old), new_label=str(new))
    emit_outcome(ReviewResult(result, old_std, new_std), reports, console(), console(stderr=True))
    exit_with(result.identical)


@standard_group.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def standard_show(path: Path, as_json: bool) -> None:
    """Summarise a standard: format, runner class, how it was recorded, and per series its step key,
    points, step range, value types and NaN count.

    \b
    Examples:
      detaudit standard show standards/sd3_pickscore_nft.cpu-intel-6.207-avx512.json
      detaudit standard show golden_values_dev.json --json
    """
    from detaudit.render.jsonout import dump_json
    from detaudit.render.standard import print_standard_summary, standard_json
    from detaudit.standards.formats import load_any

    std = load_any(path)
    if as_json:
        click.echo(dump_json(standard_json(std)))
    else:
        print_standard_summary(std, console())
