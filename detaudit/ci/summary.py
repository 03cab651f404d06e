"""GitHub job summaries: markdown appended to the file named by ``GITHUB_STEP_SUMMARY``.

A headline, then a table of cases (series, or cards for a suite) with their status and
first divergence; passing rows are folded into one count line when there are many.

Names, paths and messages come from the run and the user's files, so none is written as
markdown: each is an inline code span (no heading, link, emphasis or HTML can come out of
it), with ``|`` escaped so that it cannot end a table cell and line breaks and control
characters written as escapes so that it cannot end a row.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from detaudit.ci.cases import Case

STATUS = {"passed": "✅ passed", "failed": "❌ failed", "error": "❌ error", "skipped": "⏭️ skipped"}
APPROXIMATE = "✅ passed (approximate)"
MAX_PASSING_ROWS = 30
SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BACKTICKS = re.compile("`+")


def md_code(text: str, *, in_table: bool = True) -> str:
    """``text`` as one inline code span that markdown cannot read anything else into."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
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
    passing = [c for c in cases if c.ok and not c.approximate]
    lines += [_row(c) for c in shown_always]
    shown = passing if len(passing) <= MAX_PASSING_ROWS else []
    lines += [_row(c) for c in shown]
    if len(passing) > len(shown):
        lines.append(f"| {STATUS['passed']} | {len(passing)} more | |")
    return "\n".join(lines) + "\n\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> str | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set. Returns a warning when the file cannot
    be written (the verdict stands: a summary is a report, not the gate), else None."""
    target = (env if env is not None else os.environ).get(SUMMARY_VARIABLE)
    if not target:
        return None
    try:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(markdown)
    except OSError as exc:
        return f"{target}: cannot append the step summary ({SUMMARY_VARIABLE}): {exc.strerror or exc}"
    return None
