"""The numbers behind a page's charts: x positions, run-to-run differences, downsampling.

Plain Python (the page needs no numpy): the work per point is done by C loops where it matters
(``map``, ``min``/``max``/``sum`` over slices of an ``array('d')``), and only the panels a page
draws are worked out.

A series is plotted against its steps when every step is a finite number, else against the
point index (the page says which). Points of two runs are paired by index up to the first
point whose step differs (the rule ``data.compare`` compares by), and after it by equal x
where both runs' x only grow; where neither holds, the difference curve stops.

Long series are downsampled for drawing: per bucket the minimum and maximum (an envelope
that keeps spikes), the first NaN, and every point within ``FULL_AROUND`` of the first
divergence, which is always kept exactly. The tables and the marked step always come from the
full data, never from the downsampled curves.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NAN = math.nan
INF = math.inf
# Points a curve keeps at most (two per bucket): a chart has fewer pixel columns than this.
MAX_BUCKETS = 320
# Around the first divergence every point is kept, so zooming in there shows the real data.
FULL_AROUND = 40
# Points of a sparkline (identical series): the shape only.
SPARK_BUCKETS = 40

Floats = Sequence[float]  # a list of floats, or an array('d')


@dataclass
class Points:
    """One run's series as numbers: x (steps or point index) and y (NaN where not a number)."""

    x: Floats
    y: Floats
    numeric: bool  # every value is a number (int or float; NaN and infinities count)

    def __len__(self) -> int:
        return len(self.y)


def _as_float(v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return math.copysign(INF, v)
    return NAN


def values_floats(values: Sequence[Any]) -> tuple[Floats, bool]:
    """Values as floats (bits of floats kept; non-numbers NaN) and whether all were numbers."""
    if isinstance(values, array) and values.typecode == "d":
        return values, True  # every value a float already: used as it is
    types = set(map(type, values))
    numeric = types <= {int, float}
    if types <= {float}:
        return list(values), True
    return [_as_float(v) for v in values], numeric


def steps_numbers(steps: Sequence[Any]) -> list[float] | None:
    """The steps as floats when every one is a finite int or float, else None (then the chart's
    x axis is the point index). Bools and numeric strings are not numbers here."""
    if not set(map(type, steps)) <= {int, float}:
        return None
    try:
        x = list(map(float, steps))
    except OverflowError:  # an int beyond float range
        return None
    return x if all(map(math.isfinite, x)) else None


def points(values: Sequence[Any], x: Floats | None) -> Points:
    """A series' points; ``x`` None: against the point index."""
    y, numeric = values_floats(values)
    return Points(x if x is not None else list(map(float, range(len(y)))), y, numeric)


def any_finite(y: Floats) -> bool:
    return any(map(math.isfinite, y))


def increasing(x: Floats) -> bool:
    """Every x larger than the one before."""
    return all(map(operator.lt, x, x[1:]))


def paired(a: Points, b: Points, steps_a: Sequence[Any], steps_b: Sequence[Any]) -> tuple[Floats, Floats, Floats]:
    """(x, a's values, b's values) at the points the two runs have in common (see module doc)."""
    n = min(len(a), len(b))
    same = n
    if list(steps_a[:n]) != list(steps_b[:n]):  # equal steps compare at C speed; find where they part otherwise
        same = next(i for i in range(n) if steps_a[i] != steps_b[i] or type(steps_a[i]) is not type(steps_b[i]))
    x, ya, yb = list(a.x[:same]), list(a.y[:same]), list(b.y[:same])
    if same < len(a) and same < len(b):
        rest_a, rest_b = a.x[same:], b.x[same:]
        if increasing(rest_a) and increasing(rest_b):
            where_b = {v: same + i for i, v in enumerate(rest_b)}
            for i, v in enumerate(rest_a, start=same):
                j = where_b.get(v)
                if j is not None:
                    x.append(v)
                    ya.append(a.y[i])
                    yb.append(b.y[j])
    return x, ya, yb


def differences(ya: Floats, yb: Floats) -> tuple[list[float], list[float]]:
    """|a - b| and |a - b| / max(|a|, |b|) (the figures a divergence reports), NaN where either
    is NaN, where they are equal or where the difference is infinite (nothing to draw on a log
    scale)."""
    absolute = [d if 0.0 < d < INF else NAN for d in map(abs, map(operator.sub, ya, yb))]
    scale = map(max, map(abs, ya), map(abs, yb))
    # where the difference is finite and positive, both values are finite and the scale is > 0
    relative = [d / s if d == d else NAN for d, s in zip(absolute, scale, strict=True)]
    return absolute, relative


def _bucket_extremes(chunk: Floats) -> tuple[int, int, int | None]:
    """Indices in ``chunk`` of its minimum, its maximum and its first NaN (None when it has none)."""
    total = sum(chunk)
    if total == total:  # no NaN (a NaN, or +inf beside -inf, makes the sum NaN): min and max in C
        return chunk.index(min(chunk)), chunk.index(max(chunk)), None
    first_nan = next((i for i, v in enumerate(chunk) if v != v), None)
    numbers = [(v, i) for i, v in enumerate(chunk) if v == v]
    if not numbers:
        return 0, 0, first_nan
    return min(numbers)[1], max(numbers, key=lambda t: (t[0], -t[1]))[1], first_nan


def keep_indices(y: Floats, buckets: int, around: int | None = None, full: int = FULL_AROUND) -> list[int]:
    """Sorted indices of the points to draw: all of them when few, else per bucket the minimum,
    the maximum and the first NaN, plus the first and last point and every point within
    ``full`` of ``around`` (the first divergence)."""
    n = len(y)
    if n <= 2 * buckets:
        return list(range(n))
    size = -(-n // buckets)
    keep = {0, n - 1}
    for start in range(0, n, size):
        low, high, nan = _bucket_extremes(y[start:start + size])
        keep.update((start + low, start + high))
        if nan is not None:
            keep.add(start + nan)
    if around is not None and 0 <= around < n:
        keep.update(range(max(0, around - full), min(n, around + full + 1)))
    return sorted(keep)


def take(values: Floats, indices: Sequence[int]) -> list[float]:
    if len(indices) > 1:
        return list(operator.itemgetter(*indices)(values))
    return [values[i] for i in indices]


def downsample(x: Floats, y: Floats, buckets: int = MAX_BUCKETS, around: int | None = None) -> tuple[list[float], list[float]]:
    keep = keep_indices(y, buckets, around)
    return take(x, keep), take(y, keep)


def envelope_top(x: Floats, y: Floats, buckets: int = MAX_BUCKETS, around_x: float | None = None) -> tuple[list[float], list[float]]:
    """A difference curve for a log plot: the extremes per bucket (how it grows), and every point
    near ``around_x`` (the first divergence)."""
    if len(y) <= 2 * buckets:
        return list(x), list(y)
    around = bisect_left(x, around_x) if around_x is not None and all(map(operator.le, x, x[1:])) else None
    return downsample(x, y, buckets, around)
