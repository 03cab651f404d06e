"""GitHub job summaries: markdown appended to the file named by ``GITHUB_STEP_SUMMARY``.

A headline, then a table of cases (series, or cards for a suite) with their status and
first divergence; passing rows are folded into one count line when there are many.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from detaudit.ci.cases import Case

STATUS = {"passed": "✅ passed", "failed": "❌ failed", "error": "❌ error", "skipped": "⏭️ skipped"}
MAX_PASSING_ROWS = 30


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def summary_markdown(title: str, cases: list[Case], headline: str) -> str:
    lines = [f"### {title}", "", headline, "", "| status | name | first divergence |", "|---|---|---|"]
    failing = [c for c in cases if not c.ok]
    passing = [c for c in cases if c.ok]
    for c in failing:
        lines.append(f"| {STATUS[c.status]} | `{_cell(c.name)}` | {_cell(c.message)} |")
    shown = passing if len(passing) <= MAX_PASSING_ROWS else []
    for c in shown:
        lines.append(f"| {STATUS[c.status]} | `{_cell(c.name)}` | {_cell(c.message)} |")
    if len(passing) > len(shown):
        lines.append(f"| {STATUS['passed']} | {len(passing)} more | |")
    return "\n".join(lines) + "\n\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set; returns the file, or None."""
    target = (env if env is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(markdown)
    return path
