"""A standard from metrics files a team already has, with ``record``'s rules.

``standard_from_metrics([a.jsonl, b.jsonl])`` reads two or more metrics JSONL files of runs of
one job (the reader ``diff`` and ``record`` use: exact numbers, integer steps, the step key
detected), compares them exactly, each with the first (``data.compare.diff_runs``), and builds a
standard only when every compared series is identical in every file, as ``record`` does with the
runs it starts. A standard of series that differed, or of no series, would pass runs it should
fail; so the result then holds no standard, and the diff report says why. What it builds depends
on its inputs alone (no date, no host): the same files give the same bytes.

The command that writes it (``record --metrics``) lives in the CLI; this is its library part.
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
from detaudit.errors import UsageError
from detaudit.standards.model import Standard

# The formats a standard from metrics files is built in (the others are converted from them).
BUILT_FORMATS = ("detaudit", "miles")


@dataclass
class MetricsStandard:
    """The comparison of the files, and the standard when they agree (None otherwise)."""

    report: DiffReport
    runs: list[MetricsRun]
    standard: Standard | None

    @property
    def agreed(self) -> bool:
        return self.standard is not None


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
    if len(paths) < 2:
        raise UsageError("a standard needs two or more metrics files of runs that agree (one run proves nothing)")
    if fmt not in BUILT_FORMATS:
        raise UsageError(f"unknown format {fmt!r} for a standard from metrics files (one of "
                         f"{', '.join(BUILT_FORMATS)}; `detaudit standard convert` makes the others)")
    exclusion = exclusion or Exclusion()
    runs = read_metrics_many(paths, default_step_key=step_key, exclusion=exclusion)
    report = diff_runs(runs, labels=[str(p) for p in paths])
    report.exclude_patterns = exclusion.patterns()
    require_compared(report, runs)
    if not report.ok:
        return MetricsStandard(report, runs, None)
    first = runs[0]
    series = {key: SeriesData.from_run(first, data) for key, data in first.series.items()}
    files = [Path(p).name for p in paths]
    if fmt == "miles":
        meta = {"source": f"detaudit: {len(paths)} agreeing metrics files ({', '.join(files)})"}
        return MetricsStandard(report, runs, Standard(series=series, format="miles", meta=meta, name=name))
    recorded = {"runs": len(paths), "agreeing": len(paths), "metrics": files, "detaudit": __version__}
    if report.detected_step_keys:
        recorded["detected_step_keys"] = report.detected_step_keys
    excluded = {"patterns": report.exclude_patterns, "series": report.excluded}
    standard = Standard(series=series, format="detaudit", name=name, runner=dict(runner or {}), recorded=recorded,
                        excluded=excluded)
    return MetricsStandard(report, runs, standard)
