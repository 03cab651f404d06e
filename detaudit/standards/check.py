"""One run's metrics against a standard, series by series: the comparison behind ``verify``.

Every series of the standard is compared (whatever the exclude patterns say); how a step of
the run is matched to a step of the standard is the format's rule (``formats.registry``).
"""

from __future__ import annotations

import glob
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from detaudit.data.approximate import ApproximateRule, compare_within
from detaudit.data.card import Card
from detaudit.data.compare import PairDivergence, SeriesData, compare_series
from detaudit.data.exclusion import Exclusion, exclusion_for
from detaudit.data.metrics import read_metrics
from detaudit.standards.formats import align_run_series
from detaudit.standards.formats.registry import steps_are_lenient
from detaudit.standards.standard import Standard


@dataclass
class RunCheck:
    """What a run's metrics showed against a standard."""

    compared: int = 0
    failures: list[tuple[str, PairDivergence]] = field(default_factory=list)
    approximate: list[tuple[str, str]] = field(default_factory=list)  # (series, tolerance) passed only within it
    extra_series: list[str] = field(default_factory=list)  # in the run, not in the standard


def check_run(std: Standard, metrics: Path, *, card: Card | None = None, step_key: str | None = None,
              approximate: ApproximateRule | None = None) -> RunCheck:
    """Compare the metrics file ``metrics`` with ``std``; ``approximate``: the card's tolerances for
    this runner class, applied only to series that are not identical."""
    default_step_key = step_key or (card.step_key if card else None)
    # The standard's series are always compared, whatever the exclude patterns say.
    keep = tuple(glob.escape(name) for name in std.series)
    exclusion = exclusion_for(card, include=keep) if card is not None else Exclusion(include=keep)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        run = read_metrics(metrics, default_step_key=default_step_key, exclusion=exclusion)
    lenient = steps_are_lenient(std)
    check = RunCheck(compared=len(std.series))
    for name, expected in sorted(std.series.items()):
        actual = SeriesData.from_run(run, run.series[name]) if name in run.series else None
        if actual is not None:
            actual = align_run_series(std, name, actual)
        divergence = compare_series(expected, actual, 1, lenient_steps=lenient)
        tolerance = approximate.tolerance_for(name) if approximate is not None else None
        if divergence is not None and tolerance is not None and actual is not None:
            divergence = compare_within(expected, actual, tolerance)
            if divergence is None:
                check.approximate.append((name, tolerance.describe()))
        if divergence is not None:
            check.failures.append((name, divergence))
    check.extra_series = sorted(n for n in run.series if n not in std.series and n not in std.dropped)
    return check
