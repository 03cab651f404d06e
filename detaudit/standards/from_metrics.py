"""A standard from the metrics of runs that agree, with ``record``'s rules: the library entry.

``standard_from_metrics([a.jsonl, b.jsonl])`` reads two or more metrics JSONL files of runs of
one job (the reader ``diff`` and ``record`` use: exact numbers, integer steps, the step key
detected), compares them exactly, each with the first (``compare_metrics``), and builds a
standard (``standard_of_runs``) only when every compared series is identical in every file. A
standard of series that differed, or of no series, would pass runs it should fail; so the result
then holds no standard, and the diff report says why. What it builds depends on its inputs alone
(no date, no host): the same files give the same bytes.

``record`` (``flows.record``) builds the standard of the runs it starts with ``standard_of_runs``
too, and ``record --metrics`` / the pytest plugin (``flows.record.record_metrics``) compare with
``compare_metrics`` and build with ``standard_of_runs``; the flow adds what a written standard
needs (its path checked, the one it replaces, the lock, the atomic write, git and date).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit import __version__
from detaudit.data.compare import DiffReport, SeriesData, diff_runs, require_compared
from detaudit.data.exclusion import Exclusion
from detaudit.data.metrics import MetricsRun, read_metrics_many
from detaudit.data.values import encode_value
from detaudit.errors import UsageError
from detaudit.standards.formats import FORMAT_NAMES
from detaudit.standards.model import Standard


@dataclass
class MetricsStandard:
    """The comparison of the files, and the standard when they agree (None otherwise)."""

    report: DiffReport
    runs: list[MetricsRun]
    standard: Standard | None

    @property
    def agreed(self) -> bool:
        return self.standard is not None


def compare_metrics(paths: Sequence[str | Path], *, step_key: str | None = None, exclusion: Exclusion | None = None,
                    min_runs: int = 2) -> tuple[list[MetricsRun], DiffReport]:
    """Read the metrics files and compare each with the first, exactly (``diff_runs``).

    ``UsageError`` for fewer than ``min_runs`` files (1: the pytest plugin's ``--detaudit-runs 1``,
    asked for by name; the one file is compared with itself, so the same exclusions and checks
    apply); ``InputError`` (one line, with the file and line) for a bad file."""
    if len(paths) < max(1, min_runs):
        raise UsageError("a standard needs two or more metrics files of runs that agree (one run proves nothing)")
    exclusion = exclusion or Exclusion()
    runs = read_metrics_many(paths, default_step_key=step_key, exclusion=exclusion)
    labels = [str(p) for p in paths]
    report = diff_runs(runs if len(runs) > 1 else runs * 2, labels=labels if len(runs) > 1 else labels * 2)
    report.runs = labels
    report.exclude_patterns = exclusion.patterns()
    return runs, report


def agreeing_runs(report: DiffReport) -> int:
    """How many of the compared runs agree with the first on every series."""
    return len(report.runs) - len({r for m in report.mismatched for r in m.disagreeing_runs})


def standard_of_runs(first: MetricsRun, report: DiffReport, fmt: str, *, name: str | None, runner: dict[str, Any],
                     recorded: dict[str, Any], meta: dict[str, Any]) -> Standard:
    """The standard of the first run's series that every run agreed on (``report.identical``), in
    detaudit's shape, or miles' for every other format (megatron, torchtitan and nemo files are
    converted from it when written); the series that differed are named in ``dropped``.
    ``meta``: miles' header (where the runs came from)."""
    keep = set(report.identical)
    series = {n: SeriesData.from_run(first, s) for n, s in first.series.items() if n in keep}
    dropped = {
        m.series: {"kind": m.kind, "step": encode_value(m.step), "disagreeing_runs": [r + 1 for r in m.disagreeing_runs]}
        for m in report.mismatched
    }
    if fmt != "detaudit":
        return Standard(series=series, format="miles", meta=meta, name=name, dropped=dropped)
    excluded = {"patterns": report.exclude_patterns, "series": report.excluded}
    return Standard(series=series, format="detaudit", name=name, runner=runner, recorded=recorded, excluded=excluded,
                    dropped=dropped)


def standard_from_metrics(
    paths: Sequence[str | Path],
    *,
    name: str | None = None,
    step_key: str | None = None,
    exclusion: Exclusion | None = None,
    fmt: str = "detaudit",
    runner: dict[str, Any] | None = None,
) -> MetricsStandard:
    """Compare the metrics files and build a standard from the first when all of them agree.

    ``UsageError`` for fewer than two files or an unknown ``fmt``; ``InputError`` (one line, with
    the file and line) for a bad file, and when nothing is left to compare (every series left
    out, or files holding only steps). ``runner``: what the standard says of where the runs ran
    (``{"class": [...]}``); none by default, and ``verify`` then says the class was not checked.
    """
    if fmt not in FORMAT_NAMES:
        raise UsageError(f"unknown format {fmt!r} for a standard from metrics files (one of {', '.join(FORMAT_NAMES)})")
    runs, report = compare_metrics(paths, step_key=step_key, exclusion=exclusion)
    require_compared(report, runs)
    if not report.ok:
        return MetricsStandard(report, runs, None)
    files = [Path(p).name for p in paths]
    recorded: dict[str, Any] = {"runs": len(paths), "agreeing": len(paths), "metrics": files, "detaudit": __version__}
    if report.detected_step_keys:
        recorded["detected_step_keys"] = report.detected_step_keys
    meta = {"source": f"detaudit: {len(paths)} agreeing metrics files ({', '.join(files)})"}
    return MetricsStandard(report, runs, standard_of_runs(runs[0], report, fmt, name=name, runner=dict(runner or {}),
                                                          recorded=recorded, meta=meta))
