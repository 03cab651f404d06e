"""Approximate standards: opt-in tolerances for a named runner class, kept apart from exact.

A standard is exact on the runner class it was recorded on. A card may declare that another
class (a second GPU type, a new container) is checked against that standard approximately::

    [approximate."h100-1gpu"]
    against = "h200-1gpu"                        # the class whose standard is used
    "train/loss" = { rtol = 0.05 }               # series glob -> rtol / atol / max_ulps
    "rollout/reward/*" = { atol = 1e-6, max_ulps = 64 }

Series that no glob names stay exact. A point is within tolerance when its type and step
match and ``|run - standard| <= atol + rtol * |standard|`` (with rtol or atol given) or its
ULP distance is at most ``max_ulps`` (with that given); a NaN or an infinity matches only the
very same value (an infinite standard value is no licence for any run value), and integers of
any size are compared exactly. ``verify``
reports such series as "within tolerance (approximate)", never as identical.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from detaudit.data.card import Card
from detaudit.data.compare import PairDivergence, SeriesData, first_divergence
from detaudit.data.values import same_value, ulp_distance
from detaudit.errors import InputError
from detaudit.runner_class import RunnerClass

_KEYS = ("rtol", "atol", "max_ulps")


def _within(expected: int | float, actual: int | float, rtol: float, atol: float) -> bool:
    """``|actual - expected| <= atol + rtol * |expected|`` for finite numbers, never overflowing:
    in floats where every term is finite, else (huge ints, sums beyond float range) exactly."""
    if type(expected) is float:
        diff, bound = abs(actual - expected), atol + rtol * abs(expected)
        if math.isfinite(diff) and math.isfinite(bound):
            return diff <= bound
    return abs(Fraction(actual) - Fraction(expected)) <= Fraction(atol) + Fraction(rtol) * abs(Fraction(expected))


@dataclass(frozen=True)
class Tolerance:
    rtol: float | None = None
    atol: float | None = None
    max_ulps: int | None = None

    def allows(self, expected: Any, actual: Any) -> bool:
        """Is ``actual`` within this tolerance of ``expected``? A NaN or an infinity (on either side)
        is within it only of the very same value; ints of any size are compared exactly."""
        if same_value(expected, actual):
            return True
        if type(expected) is not type(actual) or type(expected) not in (int, float):
            return False
        if type(expected) is float and not (math.isfinite(expected) and math.isfinite(actual)):
            return False
        if self.rtol is not None or self.atol is not None:
            if _within(expected, actual, self.rtol or 0, self.atol or 0):
                return True
        if self.max_ulps is not None and type(expected) is float:
            ulps = ulp_distance(expected, actual)
            if ulps is not None and ulps <= self.max_ulps:
                return True
        return False

    def describe(self) -> str:
        return ", ".join(f"{k} {getattr(self, k):g}" for k in _KEYS if getattr(self, k) is not None)


@dataclass(frozen=True)
class ApproximateRule:
    runner: str  # the class checked approximately, joined by "-"
    against: str  # the class whose standard it is checked against
    series: tuple[tuple[str, Tolerance], ...]  # (glob, tolerance), in card order

    def tolerance_for(self, name: str) -> Tolerance | None:
        for pattern, tolerance in self.series:
            if fnmatch.fnmatchcase(name, pattern):
                return tolerance
        return None


def approximate_rule(card: Card, runner_class: RunnerClass) -> ApproximateRule | None:
    """The card's approximate rule for this runner class, validated; None when there is none."""
    here = str(runner_class)
    entry = card.approximate.get(here)
    if entry is None:
        return None
    where = f"approximate.{here}"
    if not isinstance(entry, dict):
        raise InputError(card.path, f"{where}: must be a table")
    against = entry.get("against")
    if not isinstance(against, str) or not against:
        raise InputError(card.path, f"{where}: needs against = \"<runner class of the standard>\"")
    if against == here:
        raise InputError(card.path, f"{where}: against must name another runner class (a class's own standard is exact)")
    series = []
    for pattern, spec in entry.items():
        if pattern == "against":
            continue
        if not isinstance(spec, dict) or not spec or set(spec) - set(_KEYS):
            raise InputError(card.path, f"{where}.{pattern}: must be a table of {', '.join(_KEYS)}")
        values: dict[str, Any] = {}
        for key, value in spec.items():
            ok = type(value) is int if key == "max_ulps" else type(value) in (int, float)
            if not ok or value < 0 or (type(value) is float and not math.isfinite(value)):
                raise InputError(card.path, f"{where}.{pattern}.{key}: must be a non-negative number, got {value!r}")
            values[key] = value
        series.append((pattern, Tolerance(**values)))
    if not series:
        raise InputError(card.path, f"{where}: names no series; without tolerances there is nothing approximate")
    return ApproximateRule(here, against, tuple(series))


def compare_within(expected: SeriesData, actual: SeriesData, tolerance: Tolerance) -> PairDivergence | None:
    """The first point outside the tolerance (steps must match exactly), or None."""
    return first_divergence(expected, actual, same_value, tolerance.allows)
