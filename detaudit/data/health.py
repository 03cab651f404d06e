"""Curve health of one metric series: did it move, how smoothly, and do drops recover.

``detaudit health METRICS.jsonl --metric rollout/reward/raw_mean`` prints the mean of the
first and last ``window`` points and their delta, ``buckets`` bucket means, the worst
single-step drops with whether each recovers on the next point, and writes a PNG plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.exclusion import Exclusion
from detaudit.data.metrics import read_metrics
from detaudit.data.values import encode_value, to_float
from detaudit.errors import InputError


@dataclass
class Drop:
    step: Any
    before: float
    value: float
    recovered: bool | None  # next point back at or above `before`; None at the last point

    @property
    def size(self) -> float:
        return self.before - self.value


@dataclass
class HealthReport:
    path: str
    metric: str
    steps: list[Any]
    values: list[float]
    skipped: int  # NaN / non-numeric points left out
    window: int
    first_mean: float
    last_mean: float
    buckets: list[tuple[Any, Any, float]] = field(default_factory=list)  # (first step, last step, mean)
    drops: list[Drop] = field(default_factory=list)

    @property
    def delta(self) -> float:
        return self.last_mean - self.first_mean

    def to_json(self) -> dict[str, Any]:
        """Strict JSON data: non-finite floats (an overflowing delta) encoded as ``{"float": ...}``."""
        e = encode_value
        return {
            "path": self.path, "metric": self.metric, "points": len(self.values), "skipped": self.skipped,
            "window": self.window, "first_mean": e(self.first_mean), "last_mean": e(self.last_mean),
            "delta": e(self.delta),
            "buckets": [{"first_step": e(a), "last_step": e(b), "mean": e(m)} for a, b, m in self.buckets],
            "worst_drops": [{"step": e(d.step), "before": d.before, "value": d.value, "drop": e(d.size),
                             "recovered": d.recovered} for d in self.drops],
        }


def _mean(values: list[float]) -> float:
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # the exact sum overflows (e.g. 1e308 four times): sum scaled values
        return math.fsum(v / len(values) for v in values)


def curve_health(path: str | Path, metric: str, *, window: int = 20, buckets: int = 10, worst: int = 5,
                 step_key: str | None = None) -> HealthReport:
    """Health of ``metric`` in a metrics JSONL file (``InputError`` if it has no such series)."""
    run = read_metrics(path, default_step_key=step_key, exclusion=Exclusion(defaults=()))
    if metric not in run.series:
        known = ", ".join(sorted(run.series)[:12])
        raise InputError(path, f"no series {metric!r} (series: {known}{', ...' if len(run.series) > 12 else ''})")
    series = run.series[metric]
    steps, values, skipped = [], [], 0
    for step, value in zip(series.steps(run), series.values, strict=True):
        number = to_float(value) if type(value) in (int, float) else math.nan
        if math.isfinite(number):
            steps.append(step)
            values.append(number)
        else:
            skipped += 1
    if len(values) < 2:
        raise InputError(path, f"series {metric!r} has {len(values)} finite points; need at least 2")
    w = max(1, min(window, len(values) // 2))
    report = HealthReport(str(path), metric, steps, values, skipped, w, _mean(values[:w]), _mean(values[-w:]))
    n = min(buckets, len(values))
    for b in range(n):
        lo, hi = b * len(values) // n, (b + 1) * len(values) // n
        report.buckets.append((steps[lo], steps[hi - 1], _mean(values[lo:hi])))
    drops = []
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            recovered = values[i + 1] >= values[i - 1] if i + 1 < len(values) else None
            drops.append(Drop(steps[i], values[i - 1], values[i], recovered))
    drops.sort(key=lambda d: (-d.size, str(d.step)))
    report.drops = drops[:worst]
    return report
