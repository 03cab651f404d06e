"""Panels: a series' first divergence as figures (every panel) and its curves (the panels a page
draws). The figures come from the comparison's own divergence, never from the drawn points."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detaudit.data.compare import PairDivergence
from detaudit.data.metrics import MetricsRun, Series
from detaudit.data.values import format_value
from detaudit.render.html import series as num
from detaudit.render.html.model import Curve, DiffCurve, FirstDivergence, Panel, Source


def divergence_figures(first: PairDivergence, step_key: str, values: list[tuple[str, Any]], summary: str,
                       runs: str = "") -> FirstDivergence:
    """The table of a series' first divergence: where, each curve's exact value there, how far apart."""
    return FirstDivergence(first.kind, f"{step_key} {format_value(first.step)}", format_value(first.step),
                           [(label, format_value(v)) for label, v in values], first.abs_diff, first.rel_diff,
                           first.ulps, summary, runs)


class _Axis:
    """A source's x at given points: its steps as numbers, or the point index."""

    def __init__(self, source: Source, by_step: bool) -> None:
        self.source = source
        self.by_step = by_step

    def at(self, indices: Sequence[int]) -> list[float]:
        return self.source.x_at(indices) if self.by_step else [float(i) for i in indices]


def draw(panel: Panel) -> None:
    """Fill the panel's curves (the reference first) and each run's difference from the reference."""
    sources = panel.sources
    present = [s for s in sources if s is not None]
    if not present:
        return
    by_step = all(s.numeric_steps() for s in present)
    panel.x_label = panel.step_key if by_step else "point index"
    if not by_step:
        panel.note = panel.note or "steps are not all numbers: plotted against the point index"
    first = panel.first
    around = first.index if first is not None else None
    ys: list[num.Floats | None] = []
    for source in sources:
        if source is None:
            ys.append(None)
            continue
        y, numeric = num.values_floats(source.values)
        ys.append(y)
        if not numeric and not num.any_finite(y):
            panel.note = "values are not numbers: no curve to draw"
            continue
        keep = num.keep_indices(y, num.MAX_BUCKETS, around)
        panel.curves.append(Curve(source.label, _Axis(source, by_step).at(keep), num.take(y, keep), len(y)))
    if first is not None and panel.divergence is not None:
        for k in (0, first.run):  # the reference's point, else the other run's
            if k < len(sources) and sources[k] is not None and first.index < len(ys[k] or ()):
                panel.divergence.x = _Axis(sources[k], by_step).at([first.index])[0]  # type: ignore[arg-type]
                break
    ref, ref_y = sources[0], ys[0]
    if ref is None or ref_y is None:
        return
    for source, other_y in zip(sources[1:], ys[1:], strict=True):
        if source is None or other_y is None:
            continue
        panel.diffs.append(_difference(ref, ref_y, source, other_y, by_step, around))


def _difference(ref: Source, ya: num.Floats, other: Source, yb: num.Floats, by_step: bool,
                around: int | None) -> DiffCurve:
    """|other - ref| and its relative size, at the points the two have in common (``series``)."""
    n = min(len(ya), len(yb))
    same = n
    if not ref.same_steps(other, n):
        steps_a, steps_b = ref.steps(), other.steps()
        same = next(i for i in range(n) if steps_a[i] != steps_b[i] or type(steps_a[i]) is not type(steps_b[i]))
    tail_a: list[int] = []
    tail_b: list[int] = []
    if by_step and same < len(ya) and same < len(yb):
        tail_a, tail_b = num.pair_tail(ref.x_at(range(len(ya))), other.x_at(range(len(yb))), same)
    pa, pb = ya[:same], yb[:same]
    if tail_a:
        pa, pb = list(pa) + num.take(ya, tail_a), list(pb) + num.take(yb, tail_b)
    start = num.first_unequal(pa, pb)  # before it the difference is 0: nothing to draw on a log scale
    absolute = num.absolute_differences(pa[start:], pb[start:])
    at = around - start if around is not None and start <= around < len(pa) else None
    kept, values = num.envelope_top(absolute, around=at)
    kept = [start + k for k in kept]
    relative = [num.relative_difference(pa[k], pb[k]) for k in kept]
    x = _Axis(ref, by_step).at([j if j < same else tail_a[j - same] for j in kept])
    return DiffCurve(f"{other.label} vs {ref.label}", x, values, x, relative)


def spark(name: str, step_key: str, source: Source) -> Panel:
    """An identical series: its shape, drawn small."""
    by_step = source.numeric_steps()
    y, _ = num.values_floats(source.values)
    panel = Panel(name, step_key, "identical", step_key if by_step else "point index", points=len(y))
    if num.any_finite(y):
        keep = num.keep_indices(y, num.SPARK_BUCKETS)
        panel.spark = Curve(name, _Axis(source, by_step).at(keep), num.take(y, keep), len(y))
    else:
        panel.note = "no numbers to draw"
    return panel


class RunSource(Source):
    """A series of a parsed run: its steps are the run's line steps at the series' lines."""

    def __init__(self, label: str, run: MetricsRun, series: Series, runs: RunSources) -> None:
        super().__init__(label, series.values)
        self.run = run
        self.series = series
        self._runs = runs

    def steps(self) -> Sequence[Any]:
        return self.series.steps(self.run)

    def numeric_steps(self) -> bool:
        return self._runs.line_numbers(self.run) is not None

    def x_at(self, indices: Sequence[int]) -> list[float]:
        line_x = self._runs.line_numbers(self.run)
        assert line_x is not None
        lines = self.series.lines
        return [line_x[lines[i]] for i in indices]

    def same_steps(self, other: Source, n: int) -> bool:
        if isinstance(other, RunSource) and self.series.lines[:n] == other.series.lines[:n] \
                and self._runs.same_lines(self.run, other.run):
            return True  # the same lines of runs with the same line steps: no step list is built
        return super().same_steps(other, n)


class RunSources:
    """Series of parsed runs as panel sources; each run's steps are made numbers once, and each
    pair of runs' line steps compared once."""

    def __init__(self) -> None:
        self._numbers: dict[int, list[float] | None] = {}
        self._same: dict[tuple[int, int], bool] = {}

    def line_numbers(self, run: MetricsRun) -> list[float] | None:
        if id(run) not in self._numbers:
            self._numbers[id(run)] = num.steps_numbers(run.line_steps)
        return self._numbers[id(run)]

    def same_lines(self, a: MetricsRun, b: MetricsRun) -> bool:
        key = (id(a), id(b))
        if key not in self._same:
            self._same[key] = a is b or (a.line_steps == b.line_steps
                                         and list(map(type, a.line_steps)) == list(map(type, b.line_steps)))
        return self._same[key]

    def source(self, label: str, run: MetricsRun, name: str) -> Source | None:
        series = run.series.get(name)
        return RunSource(label, run, series, self) if series is not None else None
