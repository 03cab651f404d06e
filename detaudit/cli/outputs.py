"""The options of what a command writes besides its text (``--html PATH``, ``--overwrite-html``,
``--scan FILE``; ``--junit-xml`` and ``--json`` are in ``options``), and the one call that writes
a command's outcome (``emit_outcome``: ``render.emit``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from detaudit.cli.base import warn
from detaudit.render.emit import emit
from detaudit.render.reports import Reports, Result

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


def emit_outcome(result: Result, reports: Reports, out: Any, err: Any) -> None:
    """Write every output of the command (CI reports, stdout, the page); warnings on stderr."""
    for text in emit(result, reports, out, err):
        warn(text)


__all__ = ["Reports", "emit_outcome", "html_options"]
