"""Panels: a series' first divergence as figures (every panel) and its curves (the panels a page
draws). The figures come from the comparison's own divergence, never from the drawn points."""

from __future__ import annotations

from typing import Any

from detaudit.data.compare import PairDivergence
from detaudit.data.metrics import MetricsRun
from detaudit.data.values import format_value
from detaudit.render.html import series as num
from detaudit.render.html.model import Curve, DiffCurve, FirstDivergence, Panel, Source


def divergence_figures(first: PairDivergence, step_key: str, values: list[tuple[str, Any]], summary: str,
                       runs: str = "") -> FirstDivergence:
    """The table of a series' first divergence: where, each curve's exact value there, how far apart."""
    return FirstDivergence(first.kind, f"{step_key} {format_value(first.step)}", format_value(first.step),
                           [(label, format_value(v)) for label, v in values], first.abs_diff, first.rel_diff,
                           first.ulps, summary, runs)


def draw(panel: Panel) -> None:
    """Fill the panel's curves (the reference first) and each run's difference from the reference."""
    sources = panel.sources
    if not any(s is not None for s in sources):
        return
    xs = [s.step_numbers() if s is not None else None for s in sources]
    by_step = all(x is not None for s, x in zip(sources, xs, strict=True) if s is not None)
    panel.x_label = panel.step_key if by_step else "point index"
    if not by_step:
        panel.note = panel.note or "steps are not all numbers: plotted against the point index"
    data = [num.points(s.values, x if by_step else None) if s is not None else None
            for s, x in zip(sources, xs, strict=True)]
    first = panel.first
    around = first.index if first is not None else None
    for source, pts in zip(sources, data, strict=True):
        if source is None or pts is None:
            continue
        if not pts.numeric and not num.any_finite(pts.y):
            panel.note = "values are not numbers: no curve to draw"
            continue
        x, y = num.downsample(pts.x, pts.y, num.MAX_BUCKETS, around)
        panel.curves.append(Curve(source.label, x, y, len(pts)))
    if first is not None and panel.divergence is not None:
        panel.divergence.x = _divergence_x(data, first)
    ref_points, ref_source = data[0], sources[0]
    if ref_points is None or ref_source is None:
        return
    around_x = panel.divergence.x if panel.divergence is not None else None
    for source, pts in zip(sources[1:], data[1:], strict=True):
        if source is None or pts is None:
            continue
        paired_x, ya, yb = num.paired(ref_points, pts, ref_source.steps(), source.steps())
        absolute, relative = num.differences(ya, yb)
        xa, ab = num.envelope_top(paired_x, absolute, around_x=around_x)
        xr, rel = num.envelope_top(paired_x, relative, around_x=around_x)
        panel.diffs.append(DiffCurve(f"{source.label} vs {ref_source.label}", xa, ab, xr, rel))


def _divergence_x(data: list[num.Points | None], first: PairDivergence) -> float | None:
    """Where the first divergence is on the x axis: the reference's point, else the other run's."""
    for points in (data[0], data[first.run] if first.run < len(data) else None):
        if points is not None and first.index < len(points):
            return float(points.x[first.index])
    return None


def spark(name: str, step_key: str, source: Source) -> Panel:
    """An identical series: its shape, drawn small."""
    x = source.step_numbers()
    pts = num.points(source.values, x)
    panel = Panel(name, step_key, "identical", step_key if x is not None else "point index", points=len(pts))
    if num.any_finite(pts.y):
        keep = num.keep_indices(pts.y, num.SPARK_BUCKETS)
        panel.spark = Curve(name, num.take(pts.x, keep), num.take(pts.y, keep), len(pts))
    else:
        panel.note = "no numbers to draw"
    return panel


class RunSources:
    """Series of parsed runs as panel sources; each run's steps are made numbers once."""

    def __init__(self) -> None:
        self._numbers: dict[int, list[float] | None] = {}

    def line_numbers(self, run: MetricsRun) -> list[float] | None:
        if id(run) not in self._numbers:
            self._numbers[id(run)] = num.steps_numbers(run.line_steps)
        return self._numbers[id(run)]

    def source(self, label: str, run: MetricsRun, name: str) -> Source | None:
        series = run.series.get(name)
        if series is None:
            return None
        lines = series.lines

        def numbers() -> list[float] | None:
            line_x = self.line_numbers(run)
            if line_x is None:
                return None
            return num.take(line_x, lines)

        return Source(label, series.values, lambda: series.steps(run), numbers)

