"""``--html PATH``: one self-contained HTML page per gate (``record``, ``verify``, ``verify --suite``,
``diff``, ``standard diff``).

``views`` and ``verify_view`` build what a page shows (``model``) from a command's result,
``panels`` and ``series`` work out the curves, ``trace_view`` the trace section, ``charts`` the
chart data and sparklines, ``page`` writes the HTML, ``findings`` reads a
``scan-rng --format json`` report. Plain Python throughout: the page needs no numpy and no
matplotlib (the vendored uPlot draws the charts in the browser).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from detaudit.fileio import write_atomic

if TYPE_CHECKING:
    from detaudit.render.html.model import Page

OVERWRITE_FLAG = "--overwrite-html"


def write_html(path: Path, page: Page, *, overwrite: bool = False) -> None:
    """Write the page atomically (never half a file; an existing file only with ``overwrite``)."""
    from detaudit.render.html.page import render_page

    write_atomic(path, render_page(page), overwrite=overwrite, replace_flag=OVERWRITE_FLAG)
