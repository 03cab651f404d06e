"""The numbers behind a page's plots: x positions, run-to-run differences, downsampling.

A series is plotted against its steps when every step is a finite number, else against the
point index (the page says which). Points of two runs are paired by index up to the first
point whose step differs (the rule ``data.compare`` compares by), and after it by equal x
where both runs' x only grow; where neither holds, the difference curve stops.

Long series are downsampled for drawing: per bucket the minimum and maximum (an envelope
that keeps spikes), the first NaN, and every point within ``FULL_AROUND`` of the first
divergence, which is always kept exactly. The tables and the marked step always come from the
full data, never from the downsampled curves.

numpy is there whenever a page is written: matplotlib, which draws the plots, requires it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Points a curve keeps at most (two per bucket): a 7-inch plot has fewer pixel columns than this.
MAX_BUCKETS = 320
# Around the first divergence every point is kept, so zooming in there shows the real data.
FULL_AROUND = 40
# Points of a sparkline (identical series): the shape only.
SPARK_BUCKETS = 40


@dataclass
class Points:
    """One run's series as numbers: x (steps or point index) and y (NaN where not a number)."""

    x: np.ndarray
    y: np.ndarray
    numeric: bool  # every value is a number (int or float; NaN and infinities count)

    def __len__(self) -> int:
        return len(self.y)


def _is_number(v: Any) -> bool:
    return type(v) in (int, float)


def _as_float(v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return math.copysign(math.inf, v)
    return math.nan


def values_array(values: Sequence[Any]) -> tuple[np.ndarray, bool]:
    """Values as float64 (bits of floats kept; non-numbers NaN) and whether all were numbers."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False), True
    if getattr(values, "typecode", None) == "d":  # array('d'): every value a float, zero-copy
        return np.frombuffer(values, dtype=np.float64), True  # type: ignore[call-overload]
    numeric = all(map(_is_number, values))
    return np.fromiter((_as_float(v) for v in values), dtype=np.float64, count=len(values)), numeric


def steps_array(steps: Sequence[Any]) -> np.ndarray | None:
    """The steps as float64 when every one is a finite int or float, else None (then the plot's
    x axis is the point index). Bools and numeric strings are not numbers here."""
    try:
        raw = np.asarray(steps)  # ints and floats give an int or float array, in C; anything else does not
    except (ValueError, OverflowError):
        return None
    if raw.dtype.kind not in "iuf" or raw.ndim != 1:
        return None
    x = raw.astype(np.float64, copy=False)
    return x if np.all(np.isfinite(x)) else None


def points(values: Sequence[Any], x: np.ndarray | None) -> Points:
    """A series' points; ``x`` None: against the point index."""
    y, numeric = values_array(values)
    if x is None:
        x = np.arange(len(y), dtype=np.float64)
    return Points(x, y, numeric)


def paired(a: Points, b: Points, steps_a: Sequence[Any], steps_b: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, a's values, b's values) at the points the two runs have in common (see module doc)."""
    n = min(len(a), len(b))
    same = n
    if steps_a[:n] != steps_b[:n]:  # equal steps compare at C speed; find where they part otherwise
        same = next(i for i in range(n) if steps_a[i] != steps_b[i] or type(steps_a[i]) is not type(steps_b[i]))
    x, ya, yb = a.x[:same], a.y[:same], b.y[:same]
    if same < max(len(a), len(b)) and same < len(a) and same < len(b):
        rest_a, rest_b = a.x[same:], b.x[same:]
        if rest_a.size and rest_b.size and np.all(np.diff(rest_a) > 0) and np.all(np.diff(rest_b) > 0):
            common, ia, ib = np.intersect1d(rest_a, rest_b, assume_unique=True, return_indices=True)
            x = np.concatenate([x, common])
            ya = np.concatenate([ya, a.y[same:][ia]])
            yb = np.concatenate([yb, b.y[same:][ib]])
    return x, ya, yb


def differences(ya: np.ndarray, yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|a - b| and |a - b| / max(|a|, |b|) (the figures a divergence reports), NaN where
    either is NaN or both are equal (nothing to draw on a log scale)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        absolute = np.abs(ya - yb)
        scale = np.maximum(np.abs(ya), np.abs(yb))
        relative = absolute / scale
    absolute[~(absolute > 0) | ~np.isfinite(absolute)] = np.nan
    relative[~(relative > 0) | ~np.isfinite(relative)] = np.nan
    return absolute, relative


def keep_indices(y: np.ndarray, buckets: int, around: int | None = None, full: int = FULL_AROUND) -> np.ndarray:
    """Sorted indices of the points to draw: all of them when few, else per bucket the minimum,
    the maximum and the first NaN, plus the first and last point and every point within
    ``full`` of ``around`` (the first divergence)."""
    n = len(y)
    if n <= 2 * buckets:
        return np.arange(n)
    size = -(-n // buckets)
    padded = np.full(size * buckets, np.nan)
    padded[:n] = y
    grid = padded.reshape(buckets, size)
    nan = np.isnan(grid)
    low = np.where(nan, np.inf, grid).argmin(axis=1)
    high = np.where(nan, -np.inf, grid).argmax(axis=1)
    base = np.arange(buckets) * size
    parts = [base + low, base + high, np.array([0, n - 1])]
    has_nan = nan.any(axis=1)
    if has_nan.any():
        parts.append((base + nan.argmax(axis=1))[has_nan])
    if around is not None and 0 <= around < n:
        parts.append(np.arange(max(0, around - full), min(n, around + full + 1)))
    keep = np.unique(np.concatenate(parts))
    return keep[keep < n]


def downsample(x: np.ndarray, y: np.ndarray, buckets: int = MAX_BUCKETS, around: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    keep = keep_indices(y, buckets, around)
    return x[keep], y[keep]


def envelope_top(x: np.ndarray, y: np.ndarray, buckets: int = MAX_BUCKETS, around_x: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A difference curve for a log plot: the largest difference per bucket (how it grows), and
    every point near ``around_x`` (the first divergence)."""
    n = len(y)
    if n <= 2 * buckets:
        return x, y
    around = int(np.searchsorted(x, around_x)) if around_x is not None and np.all(np.diff(x) >= 0) else None
    return downsample(x, y, buckets, around)
