"""One run's metrics against a standard, series by series: the comparison behind ``verify``.

Every series of the standard is compared unless ``exclude`` leaves it out (``include`` takes it
back); each left-out series is reported with its reason. A run series may stand in for a
standard series under another name (the standard's and the card's ``rename``:
``{"loss_metrics/global_avg_loss": "loss"}``). How a series is compared is the rule of the
standard's format (``formats.registry.comparison_of``: the framework's own checker), and a
series with no value to compare is an error, never a pass.
"""

from __future__ import annotations

import glob
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from detaudit.data.compare import PairDivergence, SeriesData
from detaudit.data.exclusion import Exclusion, exclusion_for, reasons_summary
from detaudit.data.metrics import LINE_INDEX, MetricsRun, read_metrics
from detaudit.errors import InputError, UsageError
from detaudit.standards.formats.registry import comparison_of
from detaudit.standards.model import Standard

if TYPE_CHECKING:
    from detaudit.data.approximate import ApproximateRule
    from detaudit.data.card import Card

# The card and the approximate comparison (fractions, decimal: ~8 ms) are only named in annotations
# here, or used for a card with tolerances: a plain verify --metrics does not import them.


@dataclass
class RunCheck:
    """What a run's metrics showed against a standard."""

    compared: int = 0
    failures: list[tuple[str, PairDivergence]] = field(default_factory=list)
    approximate: list[tuple[str, str]] = field(default_factory=list)  # (series, tolerance) passed only within it
    extra_series: list[str] = field(default_factory=list)  # in the run, not in the standard
    left_out: dict[str, str] = field(default_factory=dict)  # standard series not compared -> why
    renamed: dict[str, str] = field(default_factory=dict)  # run series -> the standard series it was compared as
    run: MetricsRun | None = field(default=None, repr=False)  # the run's metrics as read for the comparison


def _chooser(exclude: tuple[str, ...], include: tuple[str, ...], std: Standard | None = None) -> Exclusion:
    rule = comparison_of(std) if std is not None else None
    own = (rule.name, rule.approximate_only, rule.approximate_reason) if rule is not None and rule.approximate_only else None
    return Exclusion(defaults=(), cli=tuple(exclude), include=tuple(include), rule=own)


def selection(std: Standard, exclude: tuple[str, ...] = (), include: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """(series to compare, left out -> reason): ``exclude`` globs leave series out, and so does the
    rule of the standard's format (Megatron-LM's approximate-only series); ``include`` takes them back."""
    chooser = _chooser(exclude, include, std)
    left_out = {name: reason for name in sorted(std.series) if (reason := chooser.reason(name)) is not None}
    return [name for name in sorted(std.series) if name not in left_out], left_out


def rename_map(std: Standard, card: Card | None) -> dict[str, str]:
    """Run series -> standard series, from the standard and the card (they may not disagree)."""
    merged = dict(std.rename)
    for source, target in (card.rename if card is not None else {}).items():
        if merged.get(source, target) != target:
            raise InputError(card.path if card else None, f"rename: {source!r} -> {target!r}, but the standard "
                             f"{std.path} renames it to {merged[source]!r}")
        merged[source] = target
    targets: dict[str, str] = {}
    for source, target in merged.items():
        if target in targets:
            raise InputError(std.path, f"rename: {targets[target]!r} and {source!r} are both renamed to {target!r} "
                                       "(the standard's and the card's rename together)")
        targets[target] = source
    return merged


def stepped_by_line(std: Standard) -> bool:
    """A standard whose every series is stepped by line number (recorded before step keys were
    detected, from lines naming no step_key): its run is read the same way, so that it still
    verifies (a `step` field stays a series, as it was recorded)."""
    return bool(std.series) and all(data.step_key == LINE_INDEX for data in std.series.values())


def _nothing_to_compare(std: Standard, name: str) -> InputError:
    missing = std.native_series(name).get("missing", [])
    why = f"every one of its {len(missing)} steps is \"nan\"" if missing else "it has no points"
    return InputError(std.path, f"series {name!r} has no value to compare ({why}): checking it would prove nothing; "
                                f"leave it out with --exclude {name!r}")


def compared_series(std: Standard, exclude: tuple[str, ...] = (), include: tuple[str, ...] = (),
                    card: Card | None = None) -> tuple[list[str], dict[str, str]]:
    """``selection``, checked before anything runs: something is left to compare, each compared
    series has a value to compare, and the rename maps agree."""
    names, left_out = selection(std, exclude, include)
    if std.series and not names:
        raise UsageError(f"nothing to compare: every one of the standard's {len(std.series)} series is left out "
                         f"({reasons_summary(left_out)})", std.path)
    for name in names:
        if not len(std.series[name]):
            raise _nothing_to_compare(std, name)
    rename_map(std, card)
    return names, left_out


def check_run(std: Standard, metrics: Path, *, card: Card | None = None, step_key: str | None = None,
              approximate: ApproximateRule | None = None, exclude: tuple[str, ...] = (),
              include: tuple[str, ...] = ()) -> RunCheck:
    """Compare the metrics file ``metrics`` with ``std``; ``approximate``: the card's tolerances for
    this runner class, applied only to series that are not identical."""
    names, left_out = compared_series(std, exclude, include, card)
    rename = rename_map(std, card)
    source_of = {target: source for source, target in rename.items()}
    default_step_key = step_key or (card.step_key if card else None)
    # The compared series are read whatever the card's exclude patterns say.
    keep = tuple(glob.escape(n) for name in names for n in {name, source_of.get(name, name)})
    exclusion = exclusion_for(card, include=keep) if card is not None else Exclusion(include=keep)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        run = read_metrics(metrics, default_step_key=default_step_key, exclusion=exclusion,
                           detect_step_key=not stepped_by_line(std))
    rule = comparison_of(std)
    check = RunCheck(compared=len(names), left_out=left_out, run=run)
    for name in names:
        source = source_of.get(name)
        if source is not None and source in run.series:
            if name in run.series:
                raise InputError(metrics, f"the run has both {source!r} and {name!r}, and rename compares {source!r} "
                                          f"as {name!r}: which one is meant?")
            check.renamed[source] = name
        else:
            source = name
        expected = std.series[name]
        actual = SeriesData.from_run(run, run.series[source]) if source in run.series else None
        divergence = rule.compare(expected, std.native_series(name), actual)
        tolerance = approximate.tolerance_for(name) if approximate is not None else None
        if divergence is not None and tolerance is not None and actual is not None:
            from detaudit.data.approximate import compare_within

            divergence = compare_within(expected, actual, tolerance)
            if divergence is None:
                check.approximate.append((name, tolerance.describe()))
        if divergence is not None:
            check.failures.append((name, divergence))
    used = set(check.renamed) | set(std.series) | set(std.dropped)
    chooser = _chooser(exclude, include)
    check.extra_series = sorted(n for n in run.series if n not in used and chooser.reason(n) is None)
    return check
