"""The page's trace section: the text report's trace lines, and per matched process its first
differing draw and module. Drawn from the traces the command already read (``RunsTraceReport``
carries them), never from the trace folders again."""

from __future__ import annotations

from detaudit.render.html.model import TraceView
from detaudit.render.trace import draw_difference_line, module_difference_line, runs_trace_lines
from detaudit.trace.compare import RunsTraceReport, first_draw_difference, first_module_difference, match_processes
from detaudit.trace.files import RunTrace


def _compared_pair(report: RunsTraceReport) -> tuple[tuple[RunTrace, RunTrace], tuple[str, str]] | None:
    """The two traces the report compared (the standard's and this run's, or run 1 and run k)."""
    traces = report.traces
    if not traces:
        return None
    first = traces[min(traces)]
    if report.reference is not None:
        return (report.reference, first), ("the standard's run", "this run")
    if report.comparison is not None:
        labels = report.comparison.labels
        if labels[1].startswith("run "):
            other = traces.get(int(labels[1].split()[-1]) - 1)
            if other is not None:
                return (first, other), labels
    later = sorted(i for i in traces if i != min(traces))
    if later:
        return (first, traces[later[0]]), (f"run {min(traces) + 1}", f"run {later[0] + 1}")
    return None


def trace_view(report: RunsTraceReport) -> TraceView:
    view = TraceView(runs_trace_lines(report), [])
    pair = _compared_pair(report)
    if pair is None:
        view.note = "one trace only: no process to compare with"
        return view
    (a_trace, b_trace), view.labels = pair
    if report.comparison is not None:
        view.labels = report.comparison.labels
    pairs, unmatched = match_processes(a_trace, b_trace)
    for a, b in pairs:
        draw = first_draw_difference(a, b)
        module = first_module_difference(a, b)
        view.processes.append((a.display, draw_difference_line(draw, view.labels) if draw else "identical",
                               module_difference_line(module, view.labels) if module else
                               ("identical" if a.modules or b.modules or a.module_chains else "not traced")))
    for text in unmatched:
        view.processes.append((text, "only in one run", ""))
    return view


def traced_processes(report: RunsTraceReport | None) -> list[tuple[str, str]] | None:
    """(kind, label) of every process the run's trace saw; None without a trace."""
    if report is None or not report.traces:
        return None
    return [(p.kind, p.label) for p in report.traces[min(report.traces)].processes]
