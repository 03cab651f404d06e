"""``detaudit health``: curve health of one series."""

from __future__ import annotations

from pathlib import Path

import click

from detaudit.cli.base import handle_errors
from detaudit.cli.options import step_key_option
from detaudit.render.console import console


@click.command()
@click.argument("metrics", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--metric", required=True, help="Series to judge, e.g. rollout/reward/raw_mean.")
@click.option("--window", default=20, show_default=True, type=click.IntRange(min=1), help="Points in the first/last means.")
@click.option("--buckets", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--worst", default=5, show_default=True, type=click.IntRange(min=0), help="Worst single-step drops to list.")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), help="Plot file (default: next to METRICS).")
@click.option("--no-png", is_flag=True, help="Do not write the plot.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@step_key_option()
@handle_errors
def health(metrics: Path, metric: str, window: int, buckets: int, worst: int, png: Path | None, no_png: bool,
           as_json: bool, step_key: str | None) -> None:
    """Curve health of one series: first/last means, bucket means, worst drops, a PNG plot.

    \b
    Examples:
      detaudit health run/metrics.jsonl --metric rollout/reward/raw_mean
      detaudit health run/metrics.jsonl --metric train/loss --no-png --json
    """
    from detaudit.data.health import curve_health
    from detaudit.render.health import plot, print_health
    from detaudit.render.jsonout import dump_json

    target = None if no_png else png or metrics.with_name(f"{metrics.stem}.{metric.replace('/', '_')}.png")
    if target is not None:  # checked before anything is read: not the metrics, not a device or a folder, writable
        from detaudit.fileio import OutputPaths

        outputs = OutputPaths()
        outputs.reads(metrics, "METRICS")
        outputs.writes(target, "the plot (--png)")
        outputs.check()
    report = curve_health(metrics, metric, window=window, buckets=buckets, worst=worst, step_key=step_key)
    written = plot(report, target) if target is not None else None
    if as_json:
        doc = report.to_json()
        doc["png"] = str(written) if written else None
        click.echo(dump_json(doc))
        return
    print_health(report, metrics, metric, written, console())
