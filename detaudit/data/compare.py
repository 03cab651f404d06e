"""Exact comparison of metric series across runs, and what kind each divergence is.

Every run is compared with the first. A series matches when every point has the same
step and the same value: same JSON type and, for floats, the same bits (NaN matches NaN;
0.0 vs -0.0 does not). The first divergent point of a series gets a *kind*:

``missing``      the series is absent from one run
``steps``        a step differs, or points are missing or extra: control flow diverged
``type``         the values have different JSON types (1 vs 1.0, null vs 0.5)
``nan``          NaN against a number
``signed-zero``  0.0 against -0.0
``close``        floats within ``CLOSE_REL_TOL`` relative (1e-6): summation or reduction order
``value``        different values: different data
``not a number`` a value a framework's checker cannot compare, so it fails it (miles: ``math.isnan``
                 raises on a string, null, an array, an object)

Values inside arrays and objects are compared the same way, element by element.
This module returns data; sentences and JSON shaping are ``detaudit.report``'s.

The *root* divergence is the first mismatching point in emission order (line order of
the first run) over all series: the place to start looking.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from detaudit.data.exclusion import reasons_summary
from detaudit.data.metrics_run import LINE_INDEX, MetricsRun, Series, steps_at
from detaudit.data.values import (
    ABSENT,
    first_difference,
    same_value,
    to_float,
    ulp_distance,
)
from detaudit.errors import InputError

# Reordered float reductions land a few ULPs to ~1e-9 relative apart in fp32/fp64 metrics;
# 1e-6 relative still reads as "same data, different order" rather than different data.
CLOSE_REL_TOL = 1e-6




@dataclass
class PairDivergence:
    """Where one run's series first departs from the first run's."""

    run: int  # index of the other run (the first run is 0)
    index: int  # point index of the first divergence
    kind: str
    step: Any  # the step there (first run's, else the other's)
    value_a: Any
    value_b: Any
    step_a: Any = ABSENT
    step_b: Any = ABSENT
    len_a: int = 0
    len_b: int = 0
    emission: tuple[int, int] = (0, 0)  # (line index, series order) in the run that has the point

    @property
    def abs_diff(self) -> float | None:
        """|a - b| as a float (inf where it is beyond float range); None unless both are numbers."""
        a, b = self.value_a, self.value_b
        if _is_number(a) and _is_number(b):
            return to_float(abs(a - b)) if type(a) is int and type(b) is int else abs(to_float(a) - to_float(b))
        return None

    @property
    def rel_diff(self) -> float | None:
        diff = self.abs_diff
        if diff is None:
            return None
        scale = max(abs(to_float(self.value_a)), abs(to_float(self.value_b)))
        if scale == 0 or math.isnan(diff):
            return 0.0 if diff == 0 else None
        if math.isinf(scale):
            return None
        return diff / scale

    @property
    def ulps(self) -> int | None:
        a, b = self.value_a, self.value_b
        if type(a) is float and type(b) is float:
            return ulp_distance(a, b)
        return None


@dataclass
class SeriesMismatch:
    """A series that differs in at least one run; ``first`` is its earliest divergence."""

    series: str
    step_key: str
    pairs: list[PairDivergence]
    values: list[Any]  # each run's value at the first divergent point (ABSENT if none)

    @property
    def first(self) -> PairDivergence:
        return min(self.pairs, key=lambda p: (p.index, p.run))

    @property
    def kind(self) -> str:
        return self.first.kind

    @property
    def step(self) -> Any:
        return self.first.step

    @property
    def disagreeing_runs(self) -> list[int]:
        return sorted(p.run for p in self.pairs)


@dataclass
class RootDivergence:
    series: str
    step_key: str
    step: Any
    line: int | None  # 1-based line in the run that has the point
    run: int  # which run's line number ``line`` is
    identical_through: dict[str, Any]  # step key -> last step emitted before the root
    kind: str = "value"


@dataclass
class DiffReport:
    """The outcome of comparing runs (``report.diff_document`` is its ``--json`` form)."""

    runs: list[str]
    compared: list[str]
    identical: list[str]
    mismatched: list[SeriesMismatch]
    root: RootDivergence | None
    excluded: dict[str, str]
    exclude_patterns: dict[str, list[str]] = field(default_factory=dict)
    torn: list[str] = field(default_factory=list)
    # step fields taken from metrics.STEP_KEYS because lines named no step_key (reports say so)
    detected_step_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatched


def _is_number(v: Any) -> bool:
    return type(v) in (int, float)


def classify(a: Any, b: Any) -> str:
    """The kind of a value divergence (``a`` and ``b`` known not to match).

    Arrays and objects get the kind of their first differing element ("value" when their
    shapes differ).
    """
    if type(a) is type(b) and type(a) in (list, dict):
        difference = first_difference(a, b)
        # Callers classify only values that do not match, and containers that do not match have a first difference.
        assert difference is not None, "classify() is for values that do not match"
        a, b = difference
        if type(a) is type(b) and type(a) in (list, dict):
            return "value"
    ta, tb = type(a), type(b)
    a_nan = ta is float and a != a
    b_nan = tb is float and b != b
    if a_nan != b_nan and _is_number(a) and _is_number(b):
        return "nan"
    if ta is not tb:
        return "type"
    if ta is float:
        if a == b:
            return "signed-zero"
        if math.isinf(a) or math.isinf(b):
            return "value"
        scale = max(abs(a), abs(b))
        return "close" if abs(a - b) <= CLOSE_REL_TOL * scale else "value"
    return "value"


class LineSteps:
    """A run's step per line, with a cached fingerprint for the same-steps fast path."""

    __slots__ = ("steps", "_types")

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps
        self._types: list[type] | None = None

    def same_as(self, other: LineSteps) -> bool:
        if self is other:
            return True
        if self.steps != other.steps:
            return False
        if self._types is None:
            self._types = list(map(type, self.steps))
        if other._types is None:
            other._types = list(map(type, other.steps))
        return self._types == other._types


def _same_step(a: Any, b: Any, lenient: bool) -> bool:
    if lenient and _is_number(a) and _is_number(b):
        return a == b  # miles standards may hold 1.0 where the run logs 1
    return same_value(a, b)


def _steps_identical(sa: list[Any], sb: list[Any], lenient: bool) -> bool:
    if sa != sb:  # catches most differences at C speed (NaN steps fall through to the loop)
        if len(sa) != len(sb):
            return False
        return all(_same_step(x, y, lenient) for x, y in zip(sa, sb, strict=False))
    return lenient or list(map(type, sa)) == list(map(type, sb))


def _first_bytes_difference(a: array, b: array, n: int, chunk: int = 4096) -> int:
    """Index of the first chunk where two float arrays' bits differ (C-speed slice compares)."""
    for start in range(0, n, chunk):
        if a[start : start + chunk].tobytes() != b[start : start + chunk].tobytes():
            return start
    return n


def _values_identical(va: array | list, vb: array | list) -> bool:
    if type(va) is array and type(vb) is array:
        return va.tobytes() == vb.tobytes()
    if len(va) != len(vb):
        return False
    return all(same_value(x, y) for x, y in zip(va, vb, strict=False))


class SeriesData:
    """A series as the comparison needs it: steps and values, plus where each point sits.

    From a run, steps are looked up lazily through the run's per-line steps: when two runs
    have the same line steps and a series sits on the same lines in both, its steps match
    without building them (``compare_series``'s fast path).
    """

    __slots__ = ("name", "step_key", "_steps", "values", "lines", "order", "line_steps")

    def __init__(self, name: str, step_key: str, steps: list[Any] | None, values: array | list,
                 lines: array | None = None, order: int = 0, line_steps: LineSteps | None = None) -> None:
        self.name = name
        self.step_key = step_key
        self._steps = steps
        self.values = values
        self.lines = lines
        self.order = order
        self.line_steps = line_steps

    @property
    def steps(self) -> list[Any]:
        if self._steps is None:
            assert self.lines is not None and self.line_steps is not None
            self._steps = steps_at(self.line_steps.steps, self.lines)
        return self._steps

    def __len__(self) -> int:
        return len(self.values)

    def points(self) -> Iterator[tuple[Any, Any]]:
        """(step, value) pairs; steps and values have one length by construction, and a mismatch
        raises rather than truncating what is rendered or compared."""
        return zip(self.steps, self.values, strict=True)

    @classmethod
    def from_run(cls, run: MetricsRun, series: Series, line_steps: LineSteps | None = None) -> SeriesData:
        return cls(series.name, series.step_key, None, series.values, series.lines, series.order,
                   line_steps or LineSteps(run.line_steps))

    def emission(self, index: int) -> tuple[int, int]:
        if self.lines is not None and index < len(self.lines):
            return (self.lines[index], self.order)
        if self.lines is not None and len(self.lines):
            return (self.lines[-1] + 1, self.order)
        return (1 << 31, self.order)


def compare_series(
    a: SeriesData | None, b: SeriesData | None, run: int = 1, *, lenient_steps: bool = False
) -> PairDivergence | None:
    """Compare one series of the first run (``a``) with another run's (``b``).

    Returns None when they match point for point, else where and how they first diverge.
    """
    if a is None or b is None:
        present = a if a is not None else b
        assert present is not None
        return PairDivergence(
            run=run,
            index=0,
            kind="missing",
            step=present.steps[0] if present.steps else ABSENT,
            value_a=a.values[0] if a is not None and len(a.values) else ABSENT,
            value_b=b.values[0] if b is not None and len(b.values) else ABSENT,
            len_a=len(a.values) if a is not None else 0,
            len_b=len(b.values) if b is not None else 0,
            emission=present.emission(0),
        )
    same_lines = (
        a.line_steps is not None and b.line_steps is not None and a.lines is not None and b.lines is not None
        and a.lines == b.lines and a.line_steps.same_as(b.line_steps)
    )
    if (same_lines or _steps_identical(a.steps, b.steps, lenient_steps)) and _values_identical(a.values, b.values):
        return None
    n = min(len(a), len(b))
    start = 0
    if same_lines and type(a.values) is array and type(b.values) is array:
        start = _first_bytes_difference(a.values, b.values, n)
    for i in range(start, n):
        sa, sb = a.steps[i], b.steps[i]
        va, vb = a.values[i], b.values[i]
        if not _same_step(sa, sb, lenient_steps):
            kind = "steps"
        elif not same_value(va, vb):
            kind = classify(va, vb)
        else:
            continue
        return PairDivergence(run, i, kind, sa, va, vb, sa, sb, len(a.steps), len(b.steps), a.emission(i))
    # All common points agree: one run has points the other lacks.
    longer = a if len(a.steps) > len(b.steps) else b
    return PairDivergence(
        run=run,
        index=n,
        kind="steps",
        step=longer.steps[n],
        value_a=a.values[n] if n < len(a.values) else ABSENT,
        value_b=b.values[n] if n < len(b.values) else ABSENT,
        step_a=a.steps[n] if n < len(a.steps) else ABSENT,
        step_b=b.steps[n] if n < len(b.steps) else ABSENT,
        len_a=len(a.steps),
        len_b=len(b.steps),
        emission=a.emission(n) if n < len(a.steps) else longer.emission(n),
    )


def first_divergence(expected: SeriesData, actual: SeriesData, same_step: Callable[[Any, Any], bool],
                     same_value: Callable[[Any, Any], bool],
                     kind: Callable[[Any, Any], str] = classify) -> PairDivergence | None:
    """Point by point, in order: the first point whose step or value differs by the given rules, or
    the first point one series has and the other lacks; None when they match. The rules are a
    format's (miles': Python ``==``) or a tolerance's (``approximate``); ``kind`` names a value
    divergence."""
    n = min(len(expected), len(actual))
    for i in range(n):
        sa, sb, va, vb = expected.steps[i], actual.steps[i], expected.values[i], actual.values[i]
        if not same_step(sa, sb):
            return PairDivergence(1, i, "steps", sa, va, vb, sa, sb, len(expected), len(actual))
        if not same_value(va, vb):
            return PairDivergence(1, i, kind(va, vb), sa, va, vb, sa, sb, len(expected), len(actual))
    if len(expected) == len(actual):
        return None
    longer = expected if len(expected) > len(actual) else actual
    return PairDivergence(
        1, n, "steps", longer.steps[n],
        expected.values[n] if n < len(expected) else ABSENT, actual.values[n] if n < len(actual) else ABSENT,
        expected.steps[n] if n < len(expected) else ABSENT, actual.steps[n] if n < len(actual) else ABSENT,
        len(expected), len(actual))


def compare_series_sets(
    runs: Sequence[dict[str, SeriesData]],
    *,
    lenient_steps: bool = False,
) -> tuple[list[str], list[str], list[SeriesMismatch]]:
    """Compare each run's series with the first run's.

    Returns (compared names, identical names, mismatches in emission order).
    """
    names: dict[str, None] = {}
    for run in runs:
        names.update(dict.fromkeys(run))
    compared = sorted(names)
    identical: list[str] = []
    mismatched: list[SeriesMismatch] = []
    first = runs[0]
    for name in compared:
        a = first.get(name)
        pairs = []
        for j in range(1, len(runs)):
            divergence = compare_series(a, runs[j].get(name), j, lenient_steps=lenient_steps)
            if divergence is not None:
                pairs.append(divergence)
        if not pairs:
            identical.append(name)
            continue
        earliest = min(pairs, key=lambda p: (p.index, p.run))
        values = []
        for run in runs:
            data = run.get(name)
            values.append(
                data.values[earliest.index] if data is not None and earliest.index < len(data.values) else ABSENT
            )
        step_key = (a or runs[earliest.run][name]).step_key
        mismatched.append(SeriesMismatch(name, step_key, pairs, values))
    mismatched.sort(key=lambda m: (m.first.emission, m.series))
    return compared, identical, mismatched


def diff_runs(runs: Sequence[MetricsRun], labels: Sequence[str] | None = None) -> DiffReport:
    """Compare parsed metrics runs (the first is the reference)."""
    if len(runs) < 2:
        raise ValueError("diff needs at least two runs")
    labels = list(labels or [r.path for r in runs])
    data = []
    for run in runs:
        line_steps = LineSteps(run.line_steps)
        data.append({name: SeriesData.from_run(run, s, line_steps) for name, s in run.series.items()})
    compared, identical, mismatched = compare_series_sets(data)
    excluded: dict[str, str] = {}
    for run in runs:
        excluded.update(run.excluded)
    root = _root(runs, mismatched) if mismatched else None
    return DiffReport(
        runs=labels,
        compared=compared,
        identical=identical,
        mismatched=mismatched,
        root=root,
        excluded=dict(sorted(excluded.items())),
        torn=[r.path for r in runs if r.torn_last_line],
        detected_step_keys=list(dict.fromkeys(key for run in runs for key in run.detected_step_keys)),
    )


def require_compared(report: DiffReport, runs: Sequence[MetricsRun]) -> None:
    """``InputError`` when the runs had no series left to compare, saying what removed them: a
    diff of nothing would be "identical", and that green would mean nothing."""
    if report.compared:
        return
    if report.excluded:
        raise InputError(None, f"nothing to compare: every series is left out ({reasons_summary(report.excluded)}); "
                               "--include GLOB takes one back")
    steps = sorted({key for run in runs for _, key in run.shape_lines if key != LINE_INDEX})
    held = f"only the step field{'s' if len(steps) > 1 else ''} {', '.join(map(repr, steps))}" if steps else "no fields"
    raise InputError(None, f"nothing to compare: the files hold no series ({held} on every line)")


def _root(runs: Sequence[MetricsRun], mismatched: list[SeriesMismatch]) -> RootDivergence:
    top = mismatched[0]
    first = top.first
    line_index = first.emission[0]
    # The emission position is in run 0 unless run 0 lacks the point.
    run_index = 0 if (top.values[0] is not ABSENT or first.kind == "steps" and first.step_a is not ABSENT) else first.run
    run = runs[run_index]
    line = run.line_number(line_index) if line_index < len(run.line_steps) else None
    through: dict[str, Any] = {}
    step_keys = run.line_step_keys
    for i in range(min(line_index, len(run.line_steps))):
        through[step_keys[i]] = run.line_steps[i]
    return RootDivergence(top.series, top.step_key, top.step, line, run_index, through, first.kind)
