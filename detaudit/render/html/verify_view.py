"""The page of ``detaudit verify``: one run against its standard, the differing series in the
order the run's lines first show each difference (as ``diff`` orders two runs), and the series
the comparison left out, with why."""

from __future__ import annotations

from detaudit.data.compare import PairDivergence, SeriesData, compare_series
from detaudit.data.metrics import MetricsRun
from detaudit.data.values import format_value
from detaudit.flows.results import VerifyResult, VerifyStatus
from detaudit.render.diff import divergence_line, kind_label
from detaudit.render.html.findings import Findings, findings_view
from detaudit.render.html.model import Page, Source
from detaudit.render.html.page_parts import (
    differing_panel,
    draw_panels,
    environment_rows,
    failed_runs,
    identical_panel,
    pattern_facts,
)
from detaudit.render.html.trace_view import trace_view, traced_processes
from detaudit.render.suite import approximate_line, status_detail
from detaudit.runner_class import class_text
from detaudit.standards.standard import Standard


def left_out_rows(result: VerifyResult) -> list[tuple[str, str]]:
    """Every series of the standard that this verify did not compare, with why: left out when the
    standard was recorded, and left out now (``--exclude``, the format's own rule)."""
    std = result.standard
    recorded = dict((std.excluded or {}).get("series") or {}) if std is not None else {}
    rows = {name: f"excluded when the standard was recorded: {why}" for name, why in recorded.items()}
    rows.update({name: f"left out of this comparison: {why}" for name, why in result.left_out.items()})
    return sorted(rows.items())


def verify_page(result: VerifyResult, card: str | None, *, findings: Findings | None = None,
                title: str | None = None) -> Page:
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
        page.facts += pattern_facts((std.excluded or {}).get("patterns") or {})
    page.excluded = left_out_rows(result)
    page.facts.append(("run's metrics", str(result.metrics_path) if result.metrics_path else "-"))
    if result.run is not None:
        page.facts.append(("run", f"{result.run.status} in {result.run.elapsed:.1f} s, log {result.run.spec.log_path}"))
    if result.compared:
        page.facts.append(("compared series", str(result.compared)))
    if result.left_out:
        page.facts.append(("left out of the comparison", str(len(result.left_out))))
    if result.extra_series:
        page.facts.append(("in the run, not in the standard", ", ".join(result.extra_series)))
    if status == VerifyStatus.APPROXIMATE:
        page.notes.append(approximate_line(result))
    if status == VerifyStatus.RUN_FAILED and result.run is not None:
        failed_runs(page, [result.run])
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
        page.trace = trace_view(result.trace)
    if findings is not None:
        page.findings = findings_view(findings, traced_processes(result.trace), result.card)
    return page


def _fill_verify_series(page: Page, result: VerifyResult, std: Standard, run: MetricsRun | None) -> None:
    source_of = {target: source for source, target in result.renamed.items()}
    failures = dict(result.failures)
    within = dict(result.approximate)
    left_out = result.left_out
    lines: list[tuple[int, str, PairDivergence]] = []  # (run line of the first divergence, series, divergence)
    for name in sorted(std.series):
        if name in left_out:
            continue  # listed with the left-out series, never as identical
        expected = std.series[name]
        if name not in failures and name not in within:
            identical_panel(page, name, expected.step_key, Source.of("standard", expected.steps, expected.values))
            continue
        actual = None
        source = source_of.get(name, name)  # the run's name of the series (a rename compares it as ``name``)
        if run is not None and source in run.series:
            actual = SeriesData.from_run(run, run.series[source])
        first = failures.get(name)
        if first is None and actual is not None:  # passed within tolerance: where it stops being identical
            first = compare_series(expected, actual, 1)
        step_key = expected.step_key or (actual.step_key if actual is not None else "")
        summary = divergence_line(name, first) if first is not None else ""
        if name in within:
            summary += f" (passed within tolerance {within[name]})"
        state = "within-tolerance" if name in within else ("missing" if first and first.kind == "missing" else "differs")
        sources: list[Source | None] = [Source.of("standard", expected.steps, expected.values),
                                        _run_source(actual)]
        panel = differing_panel(name, step_key, state, sources, first, summary, labels=("standard", "run"))
        if run is None:
            panel.sources = []
            panel.note = "the run's metrics are not in the result: no curves"
        page.differing.append(panel)
        if first is not None:
            lines.append((_run_line(run, source, first), name, first))
    if run is not None and lines:
        _order_by_run_lines(page, std, run, lines)
    draw_panels(page)


def _run_source(actual: SeriesData | None) -> Source | None:
    if actual is None:
        return None
    return Source.of("run", actual.steps, actual.values)


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

