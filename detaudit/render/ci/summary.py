"""GitHub job summaries: markdown appended to the file named by ``GITHUB_STEP_SUMMARY``.

A headline, then a table of cases (series, or cards for a suite) with their status and
first divergence; passing rows are folded into one count line when there are many.

Names, paths and messages come from the run and the user's files, so none is written as
markdown: each is an inline code span (no heading, link, emphasis or HTML can come out of
it), with ``|`` escaped so that it cannot end a table cell, and line breaks, control
characters and lone surrogates written as escapes (``render.escapes``) so that it cannot end a
row nor stop the UTF-8 writer. A series left out of the comparison is a skipped row, never a
passing one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from detaudit.render.escapes import one_line

if TYPE_CHECKING:  # the rows are built elsewhere; a command that writes no summary need not import them
    from detaudit.render.ci.cases import Case

STATUS = {"passed": "✅ passed", "failed": "❌ failed", "error": "❌ error", "skipped": "⏭️ skipped"}
APPROXIMATE = "✅ passed (approximate)"
MAX_PASSING_ROWS = 30
SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"

_BACKTICKS = re.compile("`+")


def md_code(text: str, *, in_table: bool = True) -> str:
    """``text`` as one inline code span that markdown cannot read anything else into."""
    text = one_line(text)
    if not text:
        return ""
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _status(case: Case) -> str:
    return APPROXIMATE if case.approximate and case.status == "passed" else STATUS[case.status]


def _row(case: Case) -> str:
    return f"| {_status(case)} | {md_code(case.name)} | {md_code(case.message)} |"


def summary_markdown(title: str, cases: list[Case], verdict: str, detail: str = "") -> str:
    """The summary of one command: ``verdict`` is our own label (PASSED, FAILED ...), ``title``
    and ``detail`` are written as code."""
    headline = f"**{verdict}**" + (f" {md_code(detail, in_table=False)}" if detail else "")
    lines = [f"### {md_code(title, in_table=False)}", "", headline, "", "| status | name | first divergence |",
             "|---|---|---|"]
    shown_always = [c for c in cases if not c.ok or c.approximate]
    lines += [_row(c) for c in shown_always]
    for status in ("skipped", "passed"):  # folded into one count line each when there are many
        rows = [c for c in cases if c.status == status and not c.approximate]
        shown = rows if len(rows) <= MAX_PASSING_ROWS else []
        lines += [_row(c) for c in shown]
        if len(rows) > len(shown):
            lines.append(f"| {STATUS[status]} | {len(rows)} more | |")
    return "\n".join(lines) + "\n\n"


def step_summary_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The file ``$GITHUB_STEP_SUMMARY`` names (None when it is not set)."""
    target = (env if env is not None else os.environ).get(SUMMARY_VARIABLE)
    return Path(target) if target else None


def append_step_summary(markdown: str, target: Path | None) -> str | None:
    """Append to the step summary file (None: no summary). Returns a warning when the file cannot
    be written (the verdict stands: a summary is a report, not the gate), else None. Its path was
    checked before the command ran (``OutputPaths``); this is what can still fail (a full disk)."""
    if target is None:
        return None
    try:
        with open(target, "a", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(markdown)
    except OSError as exc:
        return f"{target}: cannot append the step summary ({SUMMARY_VARIABLE}): {exc.strerror or exc}"
    return None
