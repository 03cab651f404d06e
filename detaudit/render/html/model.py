"""What a page shows, as data: the page, its panels (one per differing series), the identical
series, the trace and the scan findings. ``views`` and ``verify_view`` fill it from a command's
result, ``panels`` draws a panel's curves, ``page`` writes it as HTML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from detaudit.data.compare import PairDivergence
from detaudit.render.html.findings import FindingsView


@dataclass
class Curve:
    label: str
    x: list[float]  # drawn points (downsampled), the first divergence among them
    y: list[float]  # NaN where a value is not a number
    points: int  # points in the full series


@dataclass
class DiffCurve:
    """One run's |difference| from the reference, drawn on a log scale."""

    label: str
    x_abs: list[float]
    absolute: list[float]
    x_rel: list[float]
    relative: list[float]


@dataclass
class FirstDivergence:
    kind: str
    step_text: str  # "train/step 1"
    step: str  # the step alone, exactly ("1")
    values: list[tuple[str, str]]  # (curve, exact value)
    abs_diff: float | None
    rel_diff: float | None
    ulps: int | None
    summary: str
    runs: str = ""  # "run 2, run 3": which runs differ (with more than two)
    x: float | None = None  # where it is on the chart's x axis (set when the panel is drawn)


class Source:
    """A series as a panel draws it: its values, and its steps, made numbers only at the points
    drawn (a page of 1,000 differing series draws a few, and of a 100,000-point series a few
    hundred points)."""

    def __init__(self, label: str, values: Sequence[Any]) -> None:
        self.label = label
        self.values = values

    def steps(self) -> Sequence[Any]:
        raise NotImplementedError

    def numeric_steps(self) -> bool:
        """Every step a finite number (else the chart's x axis is the point index)."""
        raise NotImplementedError

    def x_at(self, indices: Sequence[int]) -> list[float]:
        """The steps at ``indices`` as floats (``numeric_steps`` is true)."""
        raise NotImplementedError

    def same_steps(self, other: Source, n: int) -> bool:
        """The first ``n`` steps are those of ``other``."""
        return list(self.steps()[:n]) == list(other.steps()[:n])

    @staticmethod
    def of(label: str, steps: Sequence[Any], values: Sequence[Any]) -> Source:
        return ListSource(label, steps, values)


class ListSource(Source):
    """A series whose steps are a list (a standard's)."""

    def __init__(self, label: str, steps: Sequence[Any], values: Sequence[Any]) -> None:
        super().__init__(label, values)
        self._steps = steps
        self._numbers: list[float] | None | bool = False  # False: not worked out yet

    def steps(self) -> Sequence[Any]:
        return self._steps

    def _x(self) -> list[float] | None:
        if self._numbers is False:
            from detaudit.render.html.series import steps_numbers

            self._numbers = steps_numbers(self._steps)
        return self._numbers  # type: ignore[return-value]

    def numeric_steps(self) -> bool:
        return self._x() is not None

    def x_at(self, indices: Sequence[int]) -> list[float]:
        x = self._x()
        assert x is not None
        return [x[i] for i in indices]


@dataclass
class Panel:
    """A series and how its runs compare: the page's unit. Built with the figures of its first
    divergence; ``sources`` (the reference first, None where the series is absent) are drawn
    into ``curves`` and ``diffs`` only when the page draws this panel."""

    name: str
    step_key: str
    state: str  # differs, within-tolerance, missing, added, removed, changed, identical
    x_label: str = ""
    divergence: FirstDivergence | None = None
    note: str = ""
    sources: list[Source | None] = field(default_factory=list, repr=False)
    first: PairDivergence | None = field(default=None, repr=False)
    curves: list[Curve] = field(default_factory=list)
    diffs: list[DiffCurve] = field(default_factory=list)
    spark: Curve | None = None  # identical series: the reference's shape
    points: int | None = None  # identical series: points in the reference


@dataclass
class TraceView:
    lines: list[tuple[str, str]]  # (style, sentence): the text report's trace lines
    processes: list[tuple[str, str, str]]  # per process: name, first differing draw, first differing module
    labels: tuple[str, str] = ("", "")
    note: str = ""


@dataclass
class Page:
    title: str
    verdict: str
    ok: bool
    headline: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # series left out of the comparison, why
    differing: list[Panel] = field(default_factory=list)
    identical: list[Panel] = field(default_factory=list)
    root: str = ""
    following: list[tuple[str, str]] = field(default_factory=list)  # (series, where it first differs)
    environment: list[tuple[str, str, str]] = field(default_factory=list)  # field, reference, here
    environment_labels: tuple[str, str] = ("standard", "here")
    environment_note: str = ""
    trace: TraceView | None = None
    findings: FindingsView | None = None
    notes: list[str] = field(default_factory=list)
    cards: list[tuple[str, str, str, Page | None]] = field(default_factory=list)  # suite: card, status, detail, page
