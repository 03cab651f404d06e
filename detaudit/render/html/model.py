"""What a page shows, as data: the page, its panels (one per differing series), the identical
series, the trace and the scan findings. ``views`` and ``verify_view`` fill it from a command's
result, ``panels`` draws a panel's curves, ``page`` writes it as HTML."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    """A run's (or a standard's) series as a panel draws it. Steps and their numbers are worked
    out only for the panels that are drawn (a page of 1,000 differing series draws a few)."""

    def __init__(self, label: str, values: Sequence[Any], steps: Callable[[], Sequence[Any]],
                 numbers: Callable[[], list[float] | None] | None = None) -> None:
        self.label = label
        self.values = values
        self._steps = steps
        self._numbers = numbers

    def steps(self) -> Sequence[Any]:
        return self._steps()

    def step_numbers(self) -> list[float] | None:
        """Every step as a float when all are finite numbers, else None (then: the point index)."""
        from detaudit.render.html.series import steps_numbers

        return self._numbers() if self._numbers is not None else steps_numbers(self.steps())

    @classmethod
    def of(cls, label: str, steps: Sequence[Any], values: Sequence[Any]) -> Source:
        return cls(label, values, lambda: steps)


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
