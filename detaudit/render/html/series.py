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
divergence, which is always kept exactly; a difference curve keeps each bucket's largest
difference, and the relative difference is drawn at those points. The work is done on point indices: a run's steps are looked up (made numbers) only
at the points drawn. The tables and the marked step always come from the full data, never from
the downsampled curves.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Sequence
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


def any_finite(y: Floats) -> bool:
    return any(map(math.isfinite, y))


def increasing(x: Floats) -> bool:
    """Every x larger than the one before."""
    return all(map(operator.lt, x, x[1:]))


def pair_tail(xa: Floats, xb: Floats, start: int) -> tuple[list[int], list[int]]:
    """Past ``start`` (where the two runs' steps part): the indices in each run of the x the two
    have in common, where both runs' x only grow (else none: the difference curve stops there)."""
    rest_a, rest_b = xa[start:], xb[start:]
    if not (increasing(rest_a) and increasing(rest_b)):
        return [], []
    where_b = {v: start + i for i, v in enumerate(rest_b)}
    ia, ib = [], []
    for i, v in enumerate(rest_a, start=start):
        j = where_b.get(v)
        if j is not None:
            ia.append(i)
            ib.append(j)
    return ia, ib


def first_unequal(a: Floats, b: Floats) -> int:
    """The first index where ``a`` and ``b`` differ (bit for bit, for float arrays), or the shorter
    length: a binary search over equal prefixes, each compared in C (``memcmp`` for arrays)."""
    n = min(len(a), len(b))
    if isinstance(a, array) and isinstance(b, array) and a.typecode == b.typecode:
        sa: Sequence[Any] = a.tobytes()
        sb: Sequence[Any] = b.tobytes()
        width = a.itemsize
    else:
        sa, sb, width = a, b, 1
    if sa[:n * width] == sb[:n * width]:
        return n
    lo, hi = 0, n  # the first lo points are equal; the first hi are not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sa[:mid * width] == sb[:mid * width]:
            lo = mid
        else:
            hi = mid
    return lo


def absolute_differences(ya: Floats, yb: Floats) -> list[float]:
    """|a - b| point by point, in C loops. Not cleaned: 0 where equal, NaN where either is NaN,
    inf where the difference is (``envelope_top`` draws only the finite positive ones)."""
    return list(map(abs, map(operator.sub, ya, yb)))


def relative_difference(a: float, b: float) -> float:
    """|a - b| / max(|a|, |b|), the figure a divergence reports (NaN where it is none)."""
    scale = max(abs(a), abs(b))
    return _clean(abs(a - b) / scale) if scale > 0 and scale < INF else NAN


def _clean(v: float) -> float:
    """A difference as a log scale draws it: NaN unless finite and positive."""
    return v if 0.0 < v < INF else NAN


def keep_indices(y: Floats, buckets: int, around: int | None = None, full: int = FULL_AROUND) -> list[int]:
    """Sorted indices of the points to draw: all of them when few, else per bucket the minimum,
    the maximum and the first NaN, plus the first and last point and every point within
    ``full`` of ``around`` (the first divergence)."""
    n = len(y)
    if n <= 2 * buckets:
        return list(range(n))
    size = -(-n // buckets)
    keep = {0, n - 1}
    total = sum(y)
    plain = total == total  # no NaN anywhere (nor +inf beside -inf): every bucket takes the C path
    for start in range(0, n, size):
        chunk = y[start:start + size]
        if plain or sum(chunk) == sum(chunk):
            keep.update((start + chunk.index(min(chunk)), start + chunk.index(max(chunk))))
            continue
        numbers = [(v, i) for i, v in enumerate(chunk) if v == v]
        first_nan = next((i for i, v in enumerate(chunk) if v != v), None)
        if first_nan is not None:
            keep.add(start + first_nan)
        if numbers:
            keep.update((start + min(numbers)[1], start + max(numbers, key=lambda t: (t[0], -t[1]))[1]))
    if around is not None and 0 <= around < n:
        keep.update(range(max(0, around - full), min(n, around + full + 1)))
    return sorted(keep)


def envelope_top(y: Floats, buckets: int = MAX_BUCKETS, around: int | None = None,
                 full: int = FULL_AROUND) -> tuple[list[int], list[float]]:
    """A difference curve for a log plot, as (indices, values): per bucket the largest finite
    difference (how it grows), and every point within ``full`` of ``around`` (the first
    divergence); values that are not finite and positive are NaN (no point on a log scale).
    ``y`` holds no negative values (differences)."""
    n = len(y)
    if n <= 2 * buckets:
        return list(range(n)), [_clean(v) for v in y]
    size = -(-n // buckets)
    total = sum(y)
    plain = total < INF  # no NaN, no inf anywhere: max() of each bucket, in C
    keep = set()
    for start in range(0, n, size):
        chunk = y[start:start + size]
        if plain:
            top = max(chunk)
            if top > 0:
                keep.add(start + chunk.index(top))
            continue
        finite = [(v, i) for i, v in enumerate(chunk) if 0.0 < v < INF]
        if finite:
            keep.add(start + max(finite)[1])
    if around is not None and 0 <= around < n:
        keep.update(range(max(0, around - full), min(n, around + full + 1)))
    indices = sorted(keep)
    return indices, [_clean(v) for v in take(y, indices)]


def take(values: Sequence[Any], indices: Sequence[int]) -> list[Any]:
    """``values`` at ``indices`` (one C call for many)."""
    if len(indices) > 1:
        return list(operator.itemgetter(*indices)(values))
    return [values[i] for i in indices]
