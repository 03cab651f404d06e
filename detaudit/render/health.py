"""``detaudit health``: the curve-health report of one series."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.data.health import HealthReport
from detaudit.data.values import format_value
from detaudit.errors import InputError
from detaudit.fileio import write_atomic


def print_health(report: HealthReport, metrics: Path, metric: str, plot: Path | None, console: Console) -> None:
    w = report.window
    console.print(f"[bold]{escape(metric)}[/bold] in {escape(str(metrics))}: {len(report.values)} points"
                  + (f" ({report.skipped} NaN/non-numeric left out)" if report.skipped else ""))
    console.print(f"mean of first {w}: {report.first_mean:.6g}   mean of last {w}: {report.last_mean:.6g}   "
                  f"delta: {report.delta:+.6g}")
    table = Table(header_style="bold", title="bucket means", title_justify="left")
    for col in ("steps", "mean"):
        table.add_column(col, justify="right")
    for first, last, mean in report.buckets:
        table.add_row(f"{format_value(first)}-{format_value(last)}", f"{mean:.6g}")
    console.print(table)
    if report.drops:
        drops = Table(header_style="bold", title="worst single-step drops", title_justify="left")
        for col in ("step", "before", "value", "drop", "recovers next point"):
            drops.add_column(col, justify="right")
        for d in report.drops:
            recovered = "-" if d.recovered is None else ("yes" if d.recovered else "no")
            drops.add_row(format_value(d.step), f"{d.before:.6g}", f"{d.value:.6g}", f"{d.size:.4g}", recovered)
        console.print(drops)
    if plot:
        console.print(f"plot: {escape(str(plot))}")


def plot(report: HealthReport, png: str | Path) -> Path:
    """Write the series, its bucket means and the first/last window means as a PNG.

    The PNG's folder must exist: a mistyped path is an error, never a tree of new dirs.
    """
    if not Path(png).parent.is_dir():
        raise InputError(png, "cannot write the plot: no such directory")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(None, "the plot needs matplotlib: pip install 'detaudit[plot]'") from None
    x = [float(s) if isinstance(s, (int, float)) else i for i, s in enumerate(report.steps)]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(x, report.values, lw=1, color="#4C72B0", label=report.metric)
    centres = []
    for (first, last, mean) in report.buckets:
        a, b = float(first), float(last)
        centres.append(((a + b) / 2, mean))
    ax.plot([c[0] for c in centres], [c[1] for c in centres], "o-", color="#DD8452", label="bucket means")
    ax.axhline(report.first_mean, ls="--", lw=0.8, color="grey", label=f"first {report.window}: {report.first_mean:.4g}")
    ax.axhline(report.last_mean, ls=":", lw=0.8, color="black", label=f"last {report.window}: {report.last_mean:.4g}")
    ax.set_xlabel("step")
    ax.set_ylabel(report.metric)
    ax.set_title(f"{Path(report.path).name}: {report.metric} (delta {report.delta:+.4g})")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    png = Path(png)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    write_atomic(png, buffer.getvalue(), overwrite=True)  # renamed into place: never half a PNG
    return png
