"""Review a change to a standard: per series what was added or removed, where values first
differ, by how much (max absolute and relative difference, ULPs), and which steps came or went.

``detaudit standard diff OLD NEW`` and ``record --update`` print this (``report.py`` renders
it). Points are matched by step (the n-th occurrence of a step with the n-th), so a series
that gained or lost steps still has its common points compared. Formats that cannot hold a
step's JSON type (miles, Megatron-LM, NeMo-RL, TorchTitan) match steps by numeric value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from detaudit.data.compare import SeriesData, classify
from detaudit.data.values import encode_value, same_value, ulp_distance
from detaudit.standards.standard import Standard

LENIENT_STEP_FORMATS = ("miles", "megatron", "nemo", "torchtitan")


@dataclass
class SeriesChange:
    """How one series differs between two standards. ``status``: added, removed, changed, identical."""

    name: str
    status: str
    points_old: int = 0
    points_new: int = 0
    steps_added: list[Any] = field(default_factory=list)
    steps_removed: list[Any] = field(default_factory=list)
    differing: int = 0  # common points whose values differ
    first_step: Any = None
    first_old: Any = None
    first_new: Any = None
    kind: str | None = None  # of the first differing value (compare.classify)
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulps: int | None = None

    def to_json(self) -> dict[str, Any]:
        def finite(x: float | None) -> float | None:
            return x if x is None or math.isfinite(x) else None

        return {
            "series": self.name,
            "status": self.status,
            "points": [self.points_old, self.points_new],
            "steps_added": [encode_value(s) for s in self.steps_added],
            "steps_removed": [encode_value(s) for s in self.steps_removed],
            "differing_points": self.differing,
            "first_step": encode_value(self.first_step) if self.differing else None,
            "first_values": [encode_value(self.first_old), encode_value(self.first_new)] if self.differing else None,
            "kind": self.kind,
            "max_abs_diff": finite(self.max_abs),
            "max_rel_diff": finite(self.max_rel),
            "max_ulps": self.max_ulps,
        }


@dataclass
class StandardDiff:
    old: str
    new: str
    old_format: str
    new_format: str
    series: list[SeriesChange]

    @property
    def identical(self) -> bool:
        return all(c.status == "identical" for c in self.series)

    def count(self, status: str) -> int:
        return sum(1 for c in self.series if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "formats": [self.old_format, self.new_format],
            "identical": self.identical,
            "counts": {s: self.count(s) for s in ("added", "removed", "changed", "identical")},
            "series": [c.to_json() for c in self.series],
        }


def _step_key(step: Any, lenient: bool) -> Any:
    if lenient and type(step) in (int, float) and not (type(step) is float and math.isnan(step)):
        return ("n", step)  # 1 and 1.0 are one key
    return (type(step).__name__, repr(step))


def _keyed(data: SeriesData, lenient: bool) -> dict[tuple[Any, int], tuple[Any, Any]]:
    seen: dict[Any, int] = {}
    out: dict[tuple[Any, int], tuple[Any, Any]] = {}
    for step, value in zip(data.steps, data.values):
        key = _step_key(step, lenient)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out[(key, n)] = (step, value)
    return out


def compare_series_change(name: str, old: SeriesData, new: SeriesData, *, lenient: bool = False) -> SeriesChange:
    """The change of one series present in both standards."""
    a, b = _keyed(old, lenient), _keyed(new, lenient)
    change = SeriesChange(name, "identical", len(old), len(new))
    change.steps_removed = [a[k][0] for k in a if k not in b]
    change.steps_added = [b[k][0] for k in b if k not in a]
    for key, (step, va) in a.items():
        if key not in b:
            continue
        vb = b[key][1]
        if same_value(va, vb):
            continue
        change.differing += 1
        if change.differing == 1:
            change.first_step, change.first_old, change.first_new = step, va, vb
            change.kind = classify(va, vb)
        if type(va) in (int, float) and type(vb) in (int, float):
            try:
                diff = abs(float(va) - float(vb))
            except OverflowError:
                diff = math.inf
            if not math.isnan(diff):
                change.max_abs = diff if change.max_abs is None else max(change.max_abs, diff)
                scale = max(abs(float(va)), abs(float(vb)))
                rel = diff / scale if scale else 0.0
                change.max_rel = rel if change.max_rel is None else max(change.max_rel, rel)
        if type(va) is float and type(vb) is float:
            ulps = ulp_distance(va, vb)
            if ulps is not None:
                change.max_ulps = ulps if change.max_ulps is None else max(change.max_ulps, ulps)
    if change.differing or change.steps_added or change.steps_removed:
        change.status = "changed"
    return change


def diff_standards(old: Standard, new: Standard, *, old_label: str = "old", new_label: str = "new") -> StandardDiff:
    """Per series of either standard: added, removed, changed (with figures) or identical."""
    lenient = old.format in LENIENT_STEP_FORMATS or new.format in LENIENT_STEP_FORMATS
    changes = []
    for name in sorted(set(old.series) | set(new.series)):
        if name not in old.series:
            changes.append(SeriesChange(name, "added", 0, len(new.series[name])))
        elif name not in new.series:
            changes.append(SeriesChange(name, "removed", len(old.series[name]), 0))
        else:
            changes.append(compare_series_change(name, old.series[name], new.series[name], lenient=lenient))
    return StandardDiff(old_label, new_label, old.format, new.format, changes)
