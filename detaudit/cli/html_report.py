"""``--html PATH`` (and ``--overwrite-html``, ``--scan FILE``): the options that write a command's
page, shared by record, verify, diff and standard diff."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from detaudit.errors import UsageError

F = Callable[..., Any]


def html_options(*, scan: bool) -> Callable[[F], F]:
    """``--html PATH``, ``--overwrite-html`` and, where a run's processes are known, ``--scan FILE``."""

    def apply(func: F) -> F:
        if scan:
            func = click.option("--scan", "scan_report", type=click.Path(dir_okay=False, path_type=Path),
                                help="With --html: a `detaudit scan-rng --format json` report; the page lists its "
                                     "findings that run in this run's processes (known with --trace).")(func)
        func = click.option("--overwrite-html", is_flag=True, help="Replace the --html file if it exists.")(func)
        return click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
                            help="Also write a self-contained HTML page of the outcome (curves, first divergence, "
                                 "environment, trace).")(func)

    return apply


def prepare_html(html: Path | None, overwrite: bool, scan_report: Path | None = None) -> Any:
    """Checked before anything runs: the page can be drawn and written; the scan report (if any), read.

    Returns the scan's findings (None without ``--scan``)."""
    if html is None:
        if scan_report is not None:
            raise UsageError("--scan FILE goes into the HTML page: give --html PATH too")
        if overwrite:
            raise UsageError("--overwrite-html without --html")
        return None
    from detaudit.errors import UsageError as Refused
    from detaudit.render.html import OVERWRITE_FLAG

    if html.exists() and not overwrite:
        raise Refused(f"exists; pass {OVERWRITE_FLAG} to replace it", html)
    if html.is_dir():
        raise Refused("is a directory; --html takes a file name", html)
    if scan_report is None:
        return None
    from detaudit.render.html.findings import read_scan_findings

    return read_scan_findings(scan_report)


def emit_html(html: Path, overwrite: bool, page: Any, err: Any) -> None:
    """Write the page; one line on stderr says where."""
    from rich.markup import escape

    from detaudit.render.console import PREFIX
    from detaudit.render.html import write_html

    write_html(html, page, overwrite=overwrite)
    err.print(f"{PREFIX} HTML report: {escape(str(html))}")
