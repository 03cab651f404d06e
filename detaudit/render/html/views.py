"""What a page shows, built from a command's result: ``diff``, ``record``, ``standard diff`` and
``verify --suite`` here, ``verify`` in ``verify_view``; the parts they share are in ``page_parts``.

Builders take the typed results (``detaudit.flows.results``, ``DiffReport``, ``StandardDiff``) and the
parsed series they carry; nothing is read from disk again. Sentences come from the text
renderers (``render.diff``, ``render.review``, ``render.trace``), so the page and the console
say the same thing in the same words.

A page of many differing series draws the first ``MAX_DRAWN`` of them (in the order they first
differ) and lists the rest with their first divergence, in one table; the same for the shapes of
identical series past ``MAX_SPARKS`` (``page_parts``). Every series stays in the command's ``--json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detaudit.data.compare import ABSENT, DiffReport, PairDivergence
from detaudit.data.metrics import MetricsRun
from detaudit.data.values import format_value
from detaudit.flows.results import CardOutcome, RecordResult, RecordStatus, SuiteResult, VerifyStatus
from detaudit.render.diff import divergence_line, kind_label, root_summary
from detaudit.render.html import panels
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
from detaudit.render.html.verify_view import verify_page
from detaudit.render.review import change_line
from detaudit.render.suite import status_detail
from detaudit.runner_class import class_text
from detaudit.standards.diff import StandardDiff
from detaudit.standards.standard import Standard

# --- diff and record ------------------------------------------------------------------------------


def _fill_from_report(page: Page, report: DiffReport, runs: list[MetricsRun] | None, labels: list[str],
                      identical_from: Standard | None = None) -> None:
    """Panels, root and identical list of a run-vs-run comparison."""
    page.excluded = sorted(report.excluded.items())
    many = len(labels) > 2
    sources = panels.RunSources()
    for m in report.mismatched:
        first = m.first
        summary = divergence_line(m.series, first, labels[0], labels[first.run])
        differ = ", ".join(labels[r] for r in m.disagreeing_runs) if many else ""
        state = "missing" if m.kind == "missing" else "differs"
        if runs is None:
            panel = differing_panel(m.series, m.step_key, state, [], None)
            panel.divergence = panels.divergence_figures(first, m.step_key, list(zip(labels, m.values, strict=True)),
                                                         summary, differ)
            panel.note = "the runs' metrics are not in the result: no curves"
            page.differing.append(panel)
            continue
        run_sources = [sources.source(label, run, m.series) for label, run in zip(labels, runs, strict=True)]
        page.differing.append(differing_panel(m.series, m.step_key, state, run_sources, first, summary, differ, labels))
    if report.root is not None:
        root = report.root
        where = f" (line {root.line} of {labels[root.run]})" if root.line else ""
        page.root = f"{root_summary(root)}{where}"
        page.following = [(m.series, f"{m.step_key} {format_value(m.step)} ({kind_label(m.kind)})")
                          for m in report.mismatched[1:]]
    for name in report.identical:
        if runs is not None and name in runs[0].series:
            identical_panel(page, name, runs[0].series[name].step_key, sources.source("run 1", runs[0], name))
        elif identical_from is not None and name in identical_from.series:
            data = identical_from.series[name]
            identical_panel(page, name, data.step_key, Source.of("standard", data.steps, data.values))
        else:
            identical_panel(page, name, "", None)
    draw_panels(page)


def diff_page(report: DiffReport, runs: list[MetricsRun], *, title: str = "detaudit diff") -> Page:
    """``detaudit diff A B ...``: every run against the first."""
    labels = [f"run {i + 1}" for i in range(len(report.runs))]
    n = len(report.compared)
    page = Page(title, "IDENTICAL" if report.ok else "DIFFER", report.ok,
                f"{len(report.identical)} / {n} identical, {len(report.mismatched)} mismatched")
    page.facts = [(f"{label}{' (reference)' if i == 0 else ''}", path) for i, (label, path) in
                  enumerate(zip(labels, report.runs, strict=True))]
    page.facts.append(("compared series", str(n)))
    page.facts += pattern_facts(report.exclude_patterns)
    if report.torn:
        page.notes.append("last line cut off (run killed mid-write?), dropped: " + ", ".join(report.torn))
    _fill_from_report(page, report, runs, labels)
    return page


_RECORD_VERDICTS = {
    RecordStatus.WRITTEN: "RECORDED", RecordStatus.AGREED: "AGREE", RecordStatus.DISAGREE: "RUNS DISAGREE",
    RecordStatus.EMPTY: "NOTHING TO COMPARE", RecordStatus.RUN_FAILED: "RUN FAILED",
    RecordStatus.RUNNER_MISMATCH: "RUNNER MISMATCH", RecordStatus.TRACE_NOT_OK: "TRACE NOT OK",
}


def record_page(result: RecordResult, card: str, runs_requested: int, *, findings: Findings | None = None) -> Page:
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
        RecordStatus.TRACE_NOT_OK: (f"{len(report.identical) if report else 0} series identical, but the trace is not "
                                    f"ok ({', '.join(result.trace_failures)}): nothing written"),
    }[status]
    page = Page(f"detaudit record {card}", _RECORD_VERDICTS[status], result.ok, headline)
    page.facts = [("card", card), ("runner class", class_text(result.runner_class)), ("runs", str(runs_requested))]
    if result.standard_path is not None:
        page.facts.append(("standard file", str(result.standard_path)
                           + ("" if status == RecordStatus.WRITTEN else " (not written)")))
    page.facts.append(("work dir", f"{result.workdir}{' (removed)' if result.workdir_removed else ''}"))
    page.environment_note = (f"all runs on this machine, runner class {class_text(result.runner_class)}: "
                             "nothing to compare")
    failed_runs(page, result.runs)
    if report is not None:
        labels = [f"run {i + 1}" for i in range(len(report.runs))]
        for i, state in enumerate(result.runs):
            page.facts.append((labels[i], str(state.spec.metrics_path)))
        page.facts += pattern_facts(report.exclude_patterns)
        _fill_from_report(page, report, result.metrics, labels, identical_from=result.standard)
    if result.review is not None:
        page.notes += [f"update: {change_line(c)}" for c in result.review.series if c.status != "identical"]
    if result.trace is not None:
        page.trace = trace_view(result.trace)
    if findings is not None:
        page.findings = findings_view(findings, traced_processes(result.trace), result.card)
    return page


# --- suite ----------------------------------------------------------------------------------------


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


# --- standard diff --------------------------------------------------------------------------------


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
    page.excluded = sorted(dict((new.excluded or {}).get("series") or {}).items())
    for change in diff.series:
        if change.status == "identical":
            data = new.series[change.name]
            identical_panel(page, change.name, data.step_key, Source.of("new", data.steps, data.values))
            continue
        a, b = old.series.get(change.name), new.series.get(change.name)
        step_key = (a or b).step_key if (a or b) is not None else ""  # type: ignore[union-attr]
        sources: list[Source | None] = [Source.of("old", a.steps, a.values) if a is not None else None,
                                        Source.of("new", b.steps, b.values) if b is not None else None]
        first = None
        if change.status == "changed" and a is not None:
            index = _first_index(a.steps, change.first_step) if change.differing else min(len(a), len(b or a))
            first = PairDivergence(1, index, change.kind or "steps", change.first_step if change.differing else
                                   _step_or_absent(a.steps, index), change.first_old, change.first_new)
        panel = differing_panel(change.name, step_key, change.status, sources, first, change_line(change),
                                labels=("old", "new"))
        if panel.divergence is not None and change.max_ulps is not None:
            panel.divergence.summary += f" (max {change.max_ulps} ULPs)"
        page.differing.append(panel)
    draw_panels(page)
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
