"""What a page shows, built from a command's result: the verdict, what was compared, one panel
per differing series, the identical ones, the root divergence and what follows it, the
environment's differences, the trace and the scan findings.

Builders take the typed results (``detaudit.results``, ``DiffReport``, ``StandardDiff``) and
the series behind them: a run's metrics where they are still on disk, the standard's series
otherwise (a passed verify matched them point for point). Sentences come from the text
renderers (``render.diff``, ``render.review``, ``render.trace``), so the page and the console
say the same thing in the same words.
"""

from __future__ import annotations

import glob
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from detaudit.data.compare import ABSENT, DiffReport, PairDivergence, SeriesData, compare_series
from detaudit.data.exclusion import Exclusion
from detaudit.data.metrics import MetricsRun, read_metrics_many
from detaudit.data.values import format_value
from detaudit.errors import InputError
from detaudit.render.diff import divergence_line, kind_label, root_summary
from detaudit.render.html import series as num
from detaudit.render.html.findings import Findings, FindingsView, findings_view
from detaudit.render.review import change_line
from detaudit.render.suite import approximate_line, status_detail
from detaudit.render.trace import (
    draw_difference_line,
    module_difference_line,
    runs_trace_lines,
)
from detaudit.results import (
    CardOutcome,
    RecordResult,
    RecordStatus,
    SuiteResult,
    VerifyResult,
    VerifyStatus,
)
from detaudit.runner_class import class_text
from detaudit.standards.diff import StandardDiff
from detaudit.standards.standard import Standard
from detaudit.trace import run_trace_dir
from detaudit.trace.compare import RunsTraceReport, first_draw_difference, first_module_difference, match_processes
from detaudit.trace.files import RunTrace, read_trace
from detaudit.trace.saved import read_saved


@dataclass
class Curve:
    label: str
    x: np.ndarray  # drawn points (downsampled), the first divergence among them
    y: np.ndarray
    points: int  # points in the full series


@dataclass
class DiffCurve:
    """One run's |difference| from the reference, drawn on a log scale."""

    label: str
    x_abs: np.ndarray
    absolute: np.ndarray
    x_rel: np.ndarray
    relative: np.ndarray


@dataclass
class FirstDivergence:
    kind: str
    step_text: str  # "train/step 1"
    step: str  # the step alone, exactly ("1")
    x: float | None  # where it is on the plot's x axis
    y: list[float | None]  # each curve's value there (for the markers)
    values: list[tuple[str, str]]  # (curve, exact value)
    abs_diff: float | None
    rel_diff: float | None
    ulps: int | None
    summary: str
    runs: str = ""  # "run 2, run 3": which runs differ (with more than two)


@dataclass
class Panel:
    """A series and how its runs compare: the page's unit."""

    name: str
    step_key: str
    state: str  # differs, within-tolerance, missing, added, removed, identical
    x_label: str
    curves: list[Curve] = field(default_factory=list)
    diffs: list[DiffCurve] = field(default_factory=list)
    divergence: FirstDivergence | None = None
    note: str = ""
    spark: Curve | None = None  # identical series: the reference's shape


@dataclass
class TraceView:
    lines: list[tuple[str, str]]  # (style, sentence): the text report's trace lines
    processes: list[tuple[str, str, str]]  # per process: name, first differing draw, first differing module
    labels: tuple[str, str] = ("", "")
    note: str = ""


@dataclass
class Page:
    title: str
    verdict: str
    ok: bool
    headline: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # series, why
    differing: list[Panel] = field(default_factory=list)
    identical: list[Panel] = field(default_factory=list)
    root: str = ""
    following: list[tuple[str, str]] = field(default_factory=list)  # (series, where it first differs)
    environment: list[tuple[str, str, str]] = field(default_factory=list)  # field, reference, here
    environment_labels: tuple[str, str] = ("standard", "here")
    environment_note: str = ""
    trace: TraceView | None = None
    findings: FindingsView | None = None
    notes: list[str] = field(default_factory=list)
    cards: list[tuple[str, str, str, Page | None]] = field(default_factory=list)  # suite: card, status, detail, page


# --- panels ------------------------------------------------------------------------------


class Source(NamedTuple):
    """A run's (or a standard's) series as a panel draws it."""

    label: str
    steps: Sequence[Any]
    values: Sequence[Any]
    x: np.ndarray | None = None  # the steps as numbers when already known (None: from ``steps``)

    def step_numbers(self) -> np.ndarray | None:
        return self.x if self.x is not None else num.steps_array(self.steps)


def _panel(name: str, step_key: str, state: str, sources: list[Source | None], first: PairDivergence | None,
           summary: str = "", run_labels: str = "") -> Panel:
    """A panel comparing ``sources`` (the reference first; None: the series is absent there)."""
    xs = [s.step_numbers() if s is not None else None for s in sources]
    by_step = all(x is not None for s, x in zip(sources, xs, strict=False) if s is not None)
    panel = Panel(name, step_key, state, step_key if by_step else "point index")
    if not by_step:
        panel.note = "steps are not all numbers: plotted against the point index"
    data = [num.points(s.values, x if by_step else None) if s is not None else None for s, x in zip(sources, xs, strict=False)]
    around = first.index if first is not None else None
    for source, pts in zip(sources, data, strict=False):
        if source is None or pts is None:
            continue
        if not pts.numeric and not np.isfinite(pts.y).any():
            panel.note = "values are not numbers: no curve to draw"
            continue
        keep = num.keep_indices(pts.y, num.MAX_BUCKETS, around)
        panel.curves.append(Curve(source[0], pts.x[keep], pts.y[keep], len(pts)))
    if first is not None:
        ref = data[0] if data[0] is not None else next(d for d in data if d is not None)
        x = None
        if first.index < len(ref):
            x = float(ref.x[first.index])
        else:
            other = data[first.run] if first.run < len(data) else None
            if other is not None and first.index < len(other):
                x = float(other.x[first.index])
        ys = []
        for d in data:
            ys.append(float(d.y[first.index]) if d is not None and first.index < len(d) else None)
        values = [(s[0] if s is not None else f"run {i + 1}", format_value(_value_at(s, first.index)))
                  for i, s in enumerate(sources)]
        panel.divergence = FirstDivergence(
            kind=first.kind, step_text=f"{step_key} {format_value(first.step)}", step=format_value(first.step), x=x,
            y=ys, values=values, abs_diff=first.abs_diff, rel_diff=first.rel_diff, ulps=first.ulps,
            summary=summary, runs=run_labels)
    ref_points, ref_source = data[0], sources[0]
    if ref_points is not None and ref_source is not None:
        for source, pts in zip(sources[1:], data[1:], strict=False):
            if source is None or pts is None:
                continue
            paired_x, ya, yb = num.paired(ref_points, pts, ref_source[1], source[1])
            absolute, relative = num.differences(ya, yb)
            around_x = panel.divergence.x if panel.divergence is not None else None
            xa, ab = num.envelope_top(paired_x, absolute, around_x=around_x)
            xr, rel = num.envelope_top(paired_x, relative, around_x=around_x)
            panel.diffs.append(DiffCurve(f"{source[0]} vs {ref_source[0]}", xa, ab, xr, rel))
    return panel


def _value_at(source: Source | None, index: int) -> Any:
    if source is None or index >= len(source[2]):
        return ABSENT
    return source[2][index]


def _spark(name: str, step_key: str, steps: Sequence[Any], values: Sequence[Any], x: np.ndarray | None = None) -> Panel:
    x = x if x is not None else num.steps_array(steps)
    by_step = x is not None
    pts = num.points(values, x)
    panel = Panel(name, step_key, "identical", step_key if by_step else "point index")
    if np.isfinite(pts.y).any():
        keep = num.keep_indices(pts.y, num.SPARK_BUCKETS)
        panel.spark = Curve(name, pts.x[keep], pts.y[keep], len(pts))
    else:
        panel.note = "no numbers to draw"
        panel.spark = Curve(name, pts.x[:0], pts.y[:0], len(pts))
    return panel


def _line_numbers(run: MetricsRun, cache: dict[int, np.ndarray | None]) -> np.ndarray | None:
    """Every line's step as a number (once per run), None when some line's step is not one."""
    if id(run) not in cache:
        cache[id(run)] = num.steps_array(run.line_steps)
    return cache[id(run)]


def _run_source(label: str, run: MetricsRun, name: str, cache: dict[int, np.ndarray | None]) -> Source | None:
    s = run.series.get(name)
    if s is None:
        return None
    line_x = _line_numbers(run, cache)
    x = line_x[np.frombuffer(s.lines, dtype=np.uint32)] if line_x is not None and len(s.lines) else None
    # With the steps as numbers at hand, the Python step objects (a fallback the panel never
    # reads then) are not built: that was half the page's time for a 100k-point pair.
    return Source(label, x.tolist() if x is not None else s.steps(run), s.values, x)


def _number(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


# --- diff and record ------------------------------------------------------------------------


def _excluded_rows(excluded: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(excluded.items())


def _fill_from_report(page: Page, report: DiffReport, runs: list[MetricsRun] | None, labels: list[str],
                      identical_from: Standard | None = None) -> None:
    """Panels, root and identical list of a run-vs-run comparison."""
    page.excluded = _excluded_rows(report.excluded)
    many = len(labels) > 2
    line_x: dict[int, np.ndarray | None] = {}
    for m in report.mismatched:
        first = m.first
        summary = divergence_line(m.series, first, labels[0], labels[first.run])
        differ = ", ".join(labels[r] for r in m.disagreeing_runs) if many else ""
        if runs is None:
            page.differing.append(Panel(m.series, m.step_key, "differs", m.step_key, note="the runs' metrics are gone "
                                        "(temporary work dir removed): no curves", divergence=FirstDivergence(
                                            m.kind, f"{m.step_key} {format_value(first.step)}", format_value(first.step),
                                            None, [], [(labels[i], format_value(v)) for i, v in enumerate(m.values)],
                                            first.abs_diff, first.rel_diff, first.ulps, summary, differ)))
            continue
        sources = [_run_source(label, run, m.series, line_x) for label, run in zip(labels, runs, strict=False)]
        page.differing.append(_panel(m.series, m.step_key, "missing" if m.kind == "missing" else "differs", sources,
                                     first, summary, differ))
    if report.root is not None:
        root = report.root
        where = f" (line {root.line} of {labels[root.run]})" if root.line else ""
        page.root = f"{root_summary(root)}{where}"
        page.following = [(m.series, f"{m.step_key} {format_value(m.step)} ({kind_label(m.kind)})")
                          for m in report.mismatched[1:]]
    for name in report.identical:
        if runs is not None:
            source = _run_source("run 1", runs[0], name, line_x)
            if source is not None:
                page.identical.append(_spark(name, runs[0].series[name].step_key, source.steps, source.values, source.x))
                continue
        if identical_from is not None and name in identical_from.series:
            data = identical_from.series[name]
            page.identical.append(_spark(name, data.step_key, data.steps, data.values))
            continue
        page.identical.append(Panel(name, "", "identical", "", note="metrics gone with the temporary work dir"))


def diff_page(report: DiffReport, runs: list[MetricsRun], *, title: str = "detaudit diff") -> Page:
    """``detaudit diff A B ...``: every run against the first."""
    labels = [f"run {i + 1}" for i in range(len(report.runs))]
    n = len(report.compared)
    ok = report.ok
    page = Page(title, "IDENTICAL" if ok else "DIFFER", ok,
                f"{len(report.identical)} / {n} identical, {len(report.mismatched)} mismatched")
    page.facts = [(f"{label}{' (reference)' if i == 0 else ''}", path) for i, (label, path) in
                  enumerate(zip(labels, report.runs, strict=False))]
    page.facts.append(("compared series", str(n)))
    page.facts += _pattern_facts(report.exclude_patterns)
    if report.torn:
        page.notes.append("last line cut off (run killed mid-write?), dropped: " + ", ".join(report.torn))
    _fill_from_report(page, report, runs, labels)
    return page


def _pattern_facts(patterns: dict[str, list[str]]) -> list[tuple[str, str]]:
    facts = []
    for source, words in (("default", "default exclude patterns"), ("card", "card exclude"), ("cli", "--exclude"),
                          ("include", "included back")):
        if patterns.get(source):
            facts.append((words, ", ".join(patterns[source])))
    return facts


_RECORD_VERDICTS = {
    RecordStatus.WRITTEN: "RECORDED", RecordStatus.AGREED: "AGREE", RecordStatus.DISAGREE: "RUNS DISAGREE",
    RecordStatus.EMPTY: "NOTHING TO COMPARE", RecordStatus.RUN_FAILED: "RUN FAILED",
    RecordStatus.RUNNER_MISMATCH: "RUNNER MISMATCH",
}


def _read_runs(paths: list[Path], step_key: str | None, names: Sequence[str]) -> list[MetricsRun] | None:
    """The runs' metrics again (for the curves), or None when any is gone."""
    if not paths or not all(p.is_file() for p in paths):
        return None
    keep = tuple(glob.escape(n) for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_metrics_many(paths, default_step_key=step_key, exclusion=Exclusion(include=keep))


def _failed_runs(page: Page, states: list[Any]) -> None:
    from detaudit.run.local import log_tail

    for s in states:
        if not s.ok:
            page.notes.append(f"run {s.spec.index + 1}: {s.status} (exit code {s.returncode}); log {s.spec.log_path}"
                              + _tail(log_tail, s.spec.log_path))


def _tail(log_tail: Any, path: Path) -> str:
    try:
        text = log_tail(path)
    except OSError:
        return ""
    return "\n" + text if text else ""


def record_page(result: RecordResult, card: str, runs_requested: int, *, step_key: str | None = None,
                findings: Findings | None = None) -> Page:
    """``detaudit record``: the runs against each other, and what was written."""
    status = RecordStatus(result.status)
    report = result.report
    headline = {
        RecordStatus.WRITTEN: f"{len(result.standard.series) if result.standard else 0} series identical across "
                              f"{runs_requested} runs -> {result.standard_path}",
        RecordStatus.AGREED: f"{len(report.identical) if report else 0} series identical across {runs_requested} runs; "
                             "nothing written (--no-write)",
        RecordStatus.DISAGREE: (f"{len(report.identical)} / {len(report.compared)} identical, "
                                f"{len(report.mismatched)} mismatched: no standard written") if report else "",
        RecordStatus.EMPTY: "no metric series left to compare: nothing written",
        RecordStatus.RUN_FAILED: "a run did not finish: nothing written",
        RecordStatus.RUNNER_MISMATCH: "runs landed on another runner class than the probe's: nothing written",
    }[status]
    page = Page(f"detaudit record {card}", _RECORD_VERDICTS[status], result.ok, headline)
    page.facts = [("card", card), ("runner class", class_text(result.runner_class)),
                  ("runs", str(runs_requested))]
    if result.standard_path is not None:
        page.facts.append(("standard file", str(result.standard_path)
                           + ("" if status == RecordStatus.WRITTEN else " (not written)")))
    page.facts.append(("work dir", f"{result.workdir}{' (removed)' if result.workdir_removed else ''}"))
    page.environment_note = (f"all runs on this machine, runner class {class_text(result.runner_class)}: "
                             "nothing to compare")
    _failed_runs(page, result.runs)
    if report is not None:
        labels = [f"run {i + 1}" for i in range(len(report.runs))]
        for i, state in enumerate(result.runs):
            page.facts.append((labels[i], str(state.spec.metrics_path)))
        page.facts += _pattern_facts(report.exclude_patterns)
        runs = _read_runs([s.spec.metrics_path for s in result.runs], step_key, report.compared)
        _fill_from_report(page, report, runs, labels, identical_from=result.standard)
        if runs is None and not report.ok:
            page.notes.append("the runs' metrics were not found: the page lists the divergences without curves")
    if result.review is not None:
        page.notes += [f"update: {change_line(c)}" for c in result.review.series if c.status != "identical"]
    if result.trace is not None:
        dirs = [run_trace_dir(s.spec.workdir) for s in result.runs]
        page.trace = _trace_view(result.trace, dirs, reference=None)
    if findings is not None:
        page.findings = findings_view(findings, _traced_processes(result.trace, [run_trace_dir(s.spec.workdir)
                                                                                  for s in result.runs[:1]]),
                                      result.card or card)
    return page


# --- verify -------------------------------------------------------------------------------


_ENV_LINE = re.compile(r"^(?P<field>[^:]+): standard (?P<old>.*), here (?P<new>.*)$")


def environment_rows(lines: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The environment-difference lines of ``env.provenance`` as (field, standard, here) rows; the
    lines that are not of that shape are returned apart."""
    rows, other = [], []
    for line in lines:
        m = _ENV_LINE.match(line)
        if m:
            rows.append((m["field"], m["old"], m["new"]))
        else:
            other.append(line)
    return rows, other


def verify_page(result: VerifyResult, card: str | None, *, step_key: str | None = None,
                findings: Findings | None = None, title: str | None = None) -> Page:
    """``detaudit verify``: one run against its standard."""
    status = VerifyStatus(result.status)
    headline = (f"{len(result.failures)} of {result.compared} metric series differ from {result.standard_path}"
                if status == VerifyStatus.FAILED else status_detail(status, result))
    page = Page(title or f"detaudit verify {card or result.metrics_path}", status.label, result.ok, headline)
    std = result.standard
    page.facts = [("card", card or "-"), ("runner class here", class_text(result.runner_here)),
                  ("standard's runner class", class_text(result.runner_standard)),
                  ("standard file", str(result.standard_path))]
    if std is not None:
        page.facts.append(("standard format", std.format))
        recorded = std.recorded
        if recorded:
            page.facts.append(("standard recorded", ", ".join(f"{k} {recorded[k]}" for k in
                                                              ("runs", "agreeing", "commit", "date", "detaudit")
                                                              if recorded.get(k) is not None)))
        excluded = (std.excluded or {}).get("series") or {}
        page.excluded = _excluded_rows(dict(excluded))
        page.facts += _pattern_facts((std.excluded or {}).get("patterns") or {})
    page.facts.append(("run's metrics", str(result.metrics_path) if result.metrics_path else "-"))
    if result.run is not None:
        page.facts.append(("run", f"{result.run.status} in {result.run.elapsed:.1f} s, log {result.run.spec.log_path}"))
    if result.compared:
        page.facts.append(("compared series", str(result.compared)))
    if result.extra_series:
        page.facts.append(("in the run, not in the standard", ", ".join(result.extra_series)))
    if status == VerifyStatus.APPROXIMATE:
        page.notes.append(approximate_line(result))
    if status == VerifyStatus.RUN_FAILED and result.run is not None:
        _failed_runs(page, [result.run])
    if std is not None and status in (VerifyStatus.PASSED, VerifyStatus.FAILED, VerifyStatus.APPROXIMATE):
        _fill_verify_series(page, result, std, result.run_metrics)
    rows, other = environment_rows(list(result.provenance) + [p for p in result.package_changes
                                                              if p not in result.provenance])
    page.environment = [("runner class", class_text(result.runner_standard), class_text(result.runner_here))] \
        if result.runner_standard != result.runner_here and result.runner_here is not None else []
    page.environment += rows
    page.notes += other
    if not page.environment:
        page.environment_note = ("the environment matches the standard's in every recorded field"
                                 if status == VerifyStatus.FAILED else
                                 "compared on failure only" if status != VerifyStatus.PASSED
                                 else "no package version differs from the standard's")
    if result.trace is not None:
        dirs = [run_trace_dir(result.run.spec.workdir)] if result.run is not None else []
        reference = None
        if result.standard_trace is not None:
            try:
                reference = read_saved(result.standard_trace)[1]
            except InputError:
                reference = None
        page.trace = _trace_view(result.trace, dirs, reference=reference)
    if findings is not None:
        traced = [run_trace_dir(result.run.spec.workdir)] if result.run is not None else []
        page.findings = findings_view(findings, _traced_processes(result.trace, traced), result.card or card)
    return page


def _fill_verify_series(page: Page, result: VerifyResult, std: Standard, run: MetricsRun | None) -> None:
    source_of = {target: source for source, target in result.renamed.items()}
    failures = dict(result.failures)
    within = dict(result.approximate)
    lines: list[tuple[int, str, PairDivergence]] = []  # (run line of the first divergence, series, divergence)
    for name in sorted(std.series):
        expected = std.series[name]
        if name not in failures and name not in within:
            page.identical.append(_spark(name, expected.step_key, expected.steps, expected.values))
            continue
        actual = None
        source = source_of.get(name, name)  # the run's name of the series (a rename compares it as ``name``)
        if run is not None and source in run.series:
            actual = SeriesData.from_run(run, run.series[source])
        first = failures.get(name)
        if first is None and actual is not None:  # passed within tolerance: where it stops being identical
            first = compare_series(expected, actual, 1)
        sources: list[Source | None] = [Source("standard", expected.steps, expected.values),
                                        Source("run", actual.steps, actual.values) if actual is not None else None]
        step_key = expected.step_key or (actual.step_key if actual is not None else "")
        if run is None:
            summary = divergence_line(name, first) if first is not None else ""
            panel = Panel(name, step_key, "differs", step_key, note="the run's metrics are gone: no curves")
            if first is not None:
                panel.divergence = FirstDivergence(first.kind, f"{step_key} {format_value(first.step)}",
                                                   format_value(first.step), None, [],
                                                   [("standard", format_value(first.value_a)),
                                                    ("run", format_value(first.value_b))],
                                                   first.abs_diff, first.rel_diff, first.ulps, summary)
        else:
            state = "within-tolerance" if name in within else ("missing" if first and first.kind == "missing"
                                                               else "differs")
            summary = divergence_line(name, first) if first is not None else ""
            if name in within:
                summary += f" (passed within tolerance {within[name]})"
            panel = _panel(name, step_key, state, sources, first, summary)
        page.differing.append(panel)
        if first is not None:
            lines.append((_run_line(run, source_of.get(name, name), first), name, first))
    if run is not None and lines:
        _order_by_run_lines(page, std, run, lines)


NOT_IN_RUN = 1 << 62  # the series' first divergent point is on no line of the run


def _run_line(run: MetricsRun | None, name: str, first: PairDivergence) -> int:
    """The index of the run's line holding the series' first divergent point (its last line
    when the run has fewer points)."""
    series = run.series.get(name) if run is not None else None
    if series is None or not len(series.lines):
        return NOT_IN_RUN
    return series.lines[min(first.index, len(series.lines) - 1)]


def _order_by_run_lines(page: Page, std: Standard, run: MetricsRun, lines: list[tuple[int, str, PairDivergence]]) -> None:
    """Panels, the root divergence and the series that follow, in the order the run's lines
    first show each difference (as ``diff`` orders two runs)."""
    lines.sort(key=lambda t: (t[0], t[1]))
    order = {name: i for i, (_, name, _) in enumerate(lines)}
    page.differing.sort(key=lambda p: order.get(p.name, len(order)))
    line, name, first = lines[0]
    if line != NOT_IN_RUN:
        keys = run.line_step_keys
        through = {keys[i]: run.line_steps[i] for i in range(min(line, len(run.line_steps)))}
        before = ", ".join(f"{k} through {format_value(s)}" for k, s in sorted(through.items()))
        step_text = f"{std.series[name].step_key} {format_value(first.step)}"
        page.root = ((f"all series identical to the standard before it ({before}); " if before
                      else "at the run's very first line: ")
                     + f"first difference {name} @ {step_text} ({first.kind}) (line {run.line_number(line)} of the run)")
    page.following = [(n, f"{std.series[n].step_key} {format_value(d.step)} ({kind_label(d.kind)})")
                      for _, n, d in lines[1:]]


# --- suite ----------------------------------------------------------------------------------


def suite_page(result: SuiteResult, *, findings: Findings | None = None) -> Page:
    """``detaudit verify --suite``: a row per card, and each card's page below."""
    passed = sum(1 for o in result.outcomes if o.status == VerifyStatus.PASSED)
    ok = result.exit_code == 0
    page = Page(f"detaudit verify --suite {result.suite}", "PASSED" if ok else "FAILED", ok,
                f"{passed} of {len(result.outcomes)} cards passed")
    page.facts = [("suite", str(result.suite)), ("cards", str(len(result.outcomes)))]
    for o in result.outcomes:
        sub = None
        if o.result is not None:
            sub = verify_page(o.result, str(o.card.path), findings=findings,
                              title=f"{o.card.name}: {VerifyStatus(o.status).label}")
        page.cards.append((o.card.name, VerifyStatus(o.status).label, _outcome_detail(o), sub))
    return page


def _outcome_detail(o: CardOutcome) -> str:
    return status_detail(o.status, o.result, o.error, 3)


# --- standard diff ----------------------------------------------------------------------------


def review_page(diff: StandardDiff, old: Standard, new: Standard) -> Page:
    """``detaudit standard diff OLD NEW``: the new standard against the old, per series."""
    counts = ", ".join(f"{diff.count(s)} {s}" for s in ("changed", "added", "removed", "identical"))
    page = Page(f"detaudit standard diff {diff.old} {diff.new}", "IDENTICAL" if diff.identical else "CHANGED",
                diff.identical, counts)
    page.facts = [("old standard", f"{diff.old} ({diff.old_format}, runner class {class_text(old.runner_class)})"),
                  ("new standard", f"{diff.new} ({diff.new_format}, runner class {class_text(new.runner_class)})")]
    for label, std in (("old", old), ("new", new)):
        if std.recorded:
            page.facts.append((f"{label} recorded", ", ".join(f"{k} {std.recorded[k]}" for k in
                                                              ("runs", "commit", "date") if std.recorded.get(k))))
    excluded = dict((new.excluded or {}).get("series") or {})
    page.excluded = _excluded_rows(excluded)
    for change in diff.series:
        if change.status == "identical":
            data = new.series[change.name]
            page.identical.append(_spark(change.name, data.step_key, data.steps, data.values))
            continue
        a, b = old.series.get(change.name), new.series.get(change.name)
        step_key = (a or b).step_key if (a or b) is not None else ""  # type: ignore[union-attr]
        sources: list[Source | None] = [Source("old", a.steps, a.values) if a is not None else None,
                                        Source("new", b.steps, b.values) if b is not None else None]
        first = None
        if change.status == "changed" and a is not None:
            index = _first_index(a.steps, change.first_step) if change.differing else min(len(a), len(b or a))
            first = PairDivergence(1, index, change.kind or "steps", change.first_step if change.differing else
                                   _step_or_absent(a.steps, index), change.first_old, change.first_new)
        panel = _panel(change.name, step_key, change.status, sources, first, change_line(change))
        if panel.divergence is not None and change.max_ulps is not None:
            panel.divergence.summary += f" (max {change.max_ulps} ULPs)"
        page.differing.append(panel)
    page.environment_labels = ("old", "new")
    from detaudit.env.provenance import package_differences, provenance_differences

    lines = provenance_differences(old.runner, new.runner) + package_differences(old.runner, new.runner) \
        if old.runner and new.runner else []
    rows, other = environment_rows(lines)
    if old.runner_class != new.runner_class:
        rows.insert(0, ("runner class", class_text(old.runner_class), class_text(new.runner_class)))
    page.environment = rows
    page.notes += other
    if not rows:
        page.environment_note = ("the two standards record the same environment" if old.runner and new.runner
                                 else "a standard records no environment (miles and other formats): nothing to compare")
    return page


def _first_index(steps: Sequence[Any], step: Any) -> int:
    for i, s in enumerate(steps):
        if s == step and type(s) is type(step):
            return i
    for i, s in enumerate(steps):
        if s == step:
            return i
    return 0


def _step_or_absent(steps: Sequence[Any], index: int) -> Any:
    return steps[index] if index < len(steps) else ABSENT


# --- trace ------------------------------------------------------------------------------------


def _read_traces(dirs: list[Path]) -> list[RunTrace]:
    traces = []
    for d in dirs:
        if Path(d).is_dir():
            try:
                traces.append(read_trace(d))
            except InputError:
                continue
    return traces


def _trace_view(report: RunsTraceReport, dirs: list[Path], reference: RunTrace | None) -> TraceView:
    """The text report's trace lines, and per matched process its first differing draw and module."""
    view = TraceView(runs_trace_lines(report), [])
    traces = _read_traces(dirs)
    if reference is not None and traces:
        pairs_of = (reference, traces[0])
        view.labels = ("the standard's run", "this run")
    elif len(traces) >= 2:
        pairs_of = (traces[0], traces[1])
        view.labels = ("run 1", "run 2")
    else:
        view.note = "one trace only: no process to compare with"
        return view
    if report.comparison is not None:
        view.labels = report.comparison.labels
        if view.labels != ("the standard's run", "this run") and len(traces) >= 2:
            index = int(view.labels[1].split()[-1]) - 1 if view.labels[1].startswith("run ") else 1
            if 0 < index < len(traces):
                pairs_of = (traces[0], traces[index])
    pairs, unmatched = match_processes(*pairs_of)
    for a, b in pairs:
        draw = first_draw_difference(a, b)
        module = first_module_difference(a, b)
        view.processes.append((a.display, draw_difference_line(draw, view.labels) if draw else "identical",
                               module_difference_line(module, view.labels) if module else
                               ("identical" if a.modules or b.modules or a.module_chains else "not traced")))
    for text in unmatched:
        view.processes.append((text, "only in one run", ""))
    return view


def _traced_processes(report: RunsTraceReport | None, dirs: list[Path]) -> list[tuple[str, str]] | None:
    """(kind, label) of every process the run's trace saw; None without a trace."""
    if report is None:
        return None
    traces = _read_traces(dirs)
    if not traces:
        return None
    return [(p.kind, p.label) for p in traces[0].processes]
