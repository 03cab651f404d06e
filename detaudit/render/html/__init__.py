"""``--html PATH``: one self-contained HTML page per gate (``record``, ``verify``, ``verify --suite``,
``diff``, ``standard diff``).

``views`` builds what a page shows from a command's result, ``series`` prepares the numbers,
``plots`` draws them with matplotlib, ``page`` writes the HTML, ``findings`` reads a
``scan-rng --format json`` report. Only this package imports matplotlib and numpy, and only when
a page is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from detaudit.fileio import write_atomic

if TYPE_CHECKING:
    from detaudit.render.html.views import Page

OVERWRITE_FLAG = "--overwrite-html"


def check_html_target(path: Path, overwrite: bool) -> None:
    """Before anything runs: matplotlib is there, and the page would not replace a file unasked."""
    from detaudit.errors import UsageError
    from detaudit.render.html.plots import require_matplotlib

    require_matplotlib()
    if path.exists() and not overwrite:
        raise UsageError(f"exists; pass {OVERWRITE_FLAG} to replace it", path)
    if path.is_dir():
        raise UsageError("is a directory; --html takes a file name", path)


def write_html(path: Path, page: Page, *, overwrite: bool = False) -> None:
    """Write the page atomically (never half a file; an existing file only with ``overwrite``)."""
    from detaudit.render.html.page import render_page

    write_atomic(path, render_page(page), overwrite=overwrite, replace_flag=OVERWRITE_FLAG)
