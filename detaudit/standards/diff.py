"""Review a change to a standard: per series what was added or removed, where values first
differ, by how much (max absolute and relative difference, ULPs), and which steps came or went;
and every other field that differs (the comparison rule, Megatron-LM's "nan" cells and
headers, miles' meta, how it was recorded, ...). Two standards are identical only when they
hold the same information, whatever their formats; their byte layout does not count.

``detaudit standard diff OLD NEW`` and ``record --update`` print this (``render.review``
renders it). Points are matched by step (the n-th occurrence of a step with the n-th), so a
series that gained or lost steps still has its common points compared. When either file's
format cannot hold a step's JSON type (Megatron-LM, NeMo-RL, TorchTitan: steps are keys or
text), steps are matched by numeric value. Two series are identical only as ``verify`` would
see them: the same points, in the same order (a point repeated counts each time), so the same
points in another order are a change (``reordered_at``), as verify compares them in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from detaudit.data.compare import SeriesData, classify
from detaudit.data.values import encode_value, first_difference, same_value, to_float, ulp_distance
from detaudit.errors import InputError
from detaudit.standards.formats.registry import format_of, information
from detaudit.standards.model import FIELDS, Standard

MAX_FIELD_PATHS = 8  # per field, the differing paths a review names


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
    step_keys: tuple[str, str] | None = None  # (old, new) when the step key differs
    # The step where the common points' order first differs (verify compares points in order, so
    # the same points in another order are no identical series); None when the order is the same.
    reordered_at: Any = None
    reordered: bool = False

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
            "step_keys": list(self.step_keys) if self.step_keys else None,
            "reordered_at": encode_value(self.reordered_at) if self.reordered else None,
        }


@dataclass
class FieldChange:
    """A field beyond the points that differs: where inside it (``paths``), old and new there."""

    name: str  # one of model.FIELDS
    paths: list[tuple[str, Any, Any]]  # (path, old, new); None for the side that lacks it
    more: int = 0  # differing paths not listed

    def to_json(self) -> dict[str, Any]:
        return {"field": self.name, "more": self.more,
                "paths": [{"path": p, "old": encode_value(a), "new": encode_value(b)} for p, a, b in self.paths]}


@dataclass
class StandardDiff:
    old: str
    new: str
    old_format: str
    new_format: str
    series: list[SeriesChange]
    fields: list[FieldChange] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return all(c.status == "identical" for c in self.series) and not self.fields

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
            "fields": [f.to_json() for f in self.fields],
        }


def _step_key(step: Any, lenient: bool) -> Any:
    if lenient and type(step) in (int, float) and not (type(step) is float and math.isnan(step)):
        return ("n", step)  # 1 and 1.0 are one key
    return (type(step).__name__, repr(step))


def _keyed(data: SeriesData, lenient: bool) -> dict[tuple[Any, int], tuple[Any, Any]]:
    seen: dict[Any, int] = {}
    out: dict[tuple[Any, int], tuple[Any, Any]] = {}
    for step, value in data.points():
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
            # exact for ints of any size, inf where a difference is beyond float range
            diff = to_float(abs(va - vb)) if type(va) is int and type(vb) is int else abs(to_float(va) - to_float(vb))
            if not math.isnan(diff):
                change.max_abs = diff if change.max_abs is None else max(change.max_abs, diff)
                scale = max(abs(to_float(va)), abs(to_float(vb)))
                rel = diff / scale if scale and math.isfinite(scale) else (0.0 if diff == 0 else math.inf)
                change.max_rel = rel if change.max_rel is None else max(change.max_rel, rel)
        if type(va) is float and type(vb) is float:
            ulps = ulp_distance(va, vb)
            if ulps is not None:
                change.max_ulps = ulps if change.max_ulps is None else max(change.max_ulps, ulps)
    order_old = [key for key in a if key in b]
    order_new = [key for key in b if key in a]
    if order_old != order_new:
        change.reordered = True
        change.reordered_at = a[next(x for x, y in zip(order_old, order_new, strict=True) if x != y)][0]
    if old.step_key != new.step_key:
        change.step_keys = (old.step_key, new.step_key)
    if change.differing or change.steps_added or change.steps_removed or change.step_keys or change.reordered:
        change.status = "changed"
    return change


def _paths(old: Any, new: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in new or key not in old:
                out.append((f"{path}.{key}", old.get(key), new.get(key)))
            else:
                _paths(old[key], new[key], f"{path}.{key}", out)
    elif first_difference(old, new) is not None:
        out.append((path, old, new))


def field_changes(old: Standard, new: Standard) -> list[FieldChange]:
    """The fields beyond the points that differ (``model.FIELDS``), each with where it differs."""
    a, b = information(old), information(new)
    changes = []
    for name in FIELDS:
        if first_difference(a[name], b[name]) is None:
            continue
        paths: list[tuple[str, Any, Any]] = []
        _paths(a[name], b[name], name, paths)
        changes.append(FieldChange(name, paths[:MAX_FIELD_PATHS], max(0, len(paths) - MAX_FIELD_PATHS)))
    return changes


def require_series(old: Standard, new: Standard, old_label: str, new_label: str) -> None:
    """``InputError`` when neither standard holds a series: their review compared nothing, and
    "identical" would be a green that means nothing."""
    if not old.series and not new.series:
        raise InputError(None, f"nothing to compare: neither {old_label} nor {new_label} holds a series")


def diff_standards(old: Standard, new: Standard, *, old_label: str = "old", new_label: str = "new") -> StandardDiff:
    """Per series of either standard: added, removed, changed (with figures) or identical; and
    every other field that differs."""
    lenient = not (format_of(old.format).holds_step_types and format_of(new.format).holds_step_types)
    changes = []
    for name in sorted(set(old.series) | set(new.series)):
        if name not in old.series:
            changes.append(SeriesChange(name, "added", 0, len(new.series[name])))
        elif name not in new.series:
            changes.append(SeriesChange(name, "removed", len(old.series[name]), 0))
        else:
            changes.append(compare_series_change(name, old.series[name], new.series[name], lenient=lenient))
    return StandardDiff(old_label, new_label, old.format, new.format, changes, field_changes(old, new))
