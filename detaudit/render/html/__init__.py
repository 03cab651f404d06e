"""``--html PATH``: one self-contained HTML page per gate (``record``, ``verify``, ``verify --suite``,
``diff``, ``standard diff``).

``views`` and ``verify_view`` build what a page shows (``model``) from a command's result, with
the parts they share (``page_parts``); ``panels`` and ``series`` work out the curves,
``trace_view`` the trace section, ``charts`` the chart data and sparklines, ``page`` writes the
HTML, ``findings`` reads a ``scan-rng --format json`` report. Plain Python throughout: the page needs no numpy and no
matplotlib (the vendored uPlot draws the charts in the browser).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit.fileio import write_atomic

if TYPE_CHECKING:
    from rich.console import Console

    from detaudit.render.html.model import Page

OVERWRITE_FLAG = "--overwrite-html"


def write_html(path: Path, page: Page, *, overwrite: bool = False) -> None:
    """Write the page atomically (never half a file; an existing file only with ``overwrite``)."""
    from detaudit.render.html.page import render_page

    write_atomic(path, render_page(page), overwrite=overwrite, replace_flag=OVERWRITE_FLAG)


def page_of(result: Any, reports: Any) -> Page:
    """The page of a command's result (each result kind has its view)."""
    from detaudit.flows.results import DiffResult, RecordResult, ReviewResult, SuiteResult, VerifyResult
    from detaudit.render.html.verify_view import verify_page
    from detaudit.render.html.views import diff_page, record_page, review_page, suite_page

    if isinstance(result, RecordResult):
        return record_page(result, reports.card or "", len(result.runs), findings=reports.findings)
    if isinstance(result, VerifyResult):
        return verify_page(result, reports.card, findings=reports.findings)
    if isinstance(result, SuiteResult):
        return suite_page(result, findings=reports.findings)
    if isinstance(result, DiffResult):
        return diff_page(result.report, result.runs)
    if isinstance(result, ReviewResult):
        return review_page(result.diff, result.old, result.new)
    raise TypeError(f"no page for {type(result).__name__}")


def emit_html(result: Any, reports: Any, err: Console) -> list[str]:
    """``--html PATH`` (``render.emit``'s HTML output): the page, and one line on stderr saying where."""
    if reports.html is None:
        return []
    from rich.markup import escape

    from detaudit.render.console import PREFIX

    write_html(reports.html, page_of(result, reports), overwrite=reports.overwrite_html)
    err.print(f"{PREFIX} HTML report: {escape(str(reports.html))}")
    return []
