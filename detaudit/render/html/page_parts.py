"""What the pages share: a differing series' panel with the figures of its first divergence,
an identical series' sparkline, which panels are drawn (``MAX_DRAWN``, ``MAX_SPARKS``), the
facts of exclude patterns, the environment's differences as rows, failed runs as notes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from detaudit.data.compare import ABSENT, PairDivergence
from detaudit.render.html import panels
from detaudit.render.html.model import Page, Panel, Source

# Differing series drawn as charts (the rest: a row each with the first divergence's figures),
# identical series drawn as a sparkline: bounds that keep a page of 1,000 differing series
# under 2 MB and its writing under a few seconds.
MAX_DRAWN = 20
MAX_SPARKS = 200


def values_at(sources: Sequence[Source | None], index: int, labels: Sequence[str]) -> list[tuple[str, Any]]:
    """Each source's value at point ``index`` (ABSENT where it has none), labelled."""
    return [(s.label if s is not None else label,
             s.values[index] if s is not None and index < len(s.values) else ABSENT)
            for s, label in zip(sources, labels, strict=True)]


def differing_panel(name: str, step_key: str, state: str, sources: list[Source | None],
                    first: PairDivergence | None, summary: str = "", runs: str = "",
                    labels: Sequence[str] | None = None) -> Panel:
    """A differing series with the figures of its first divergence (its curves are drawn later)."""
    panel = Panel(name, step_key, state, step_key, sources=sources, first=first)
    if first is not None:
        names = labels or [f"run {i + 1}" for i in range(len(sources))]
        panel.divergence = panels.divergence_figures(first, step_key, values_at(sources, first.index, names), summary, runs)
    return panel


def identical_panel(page: Page, name: str, step_key: str, source: Source | None) -> None:
    """An identical series: its sparkline while the page has fewer than ``MAX_SPARKS``."""
    if source is None:
        page.identical.append(Panel(name, step_key, "identical", note="its points are not in the result"))
    elif len(page.identical) < MAX_SPARKS:
        page.identical.append(panels.spark(name, step_key, source))
    else:
        page.identical.append(Panel(name, step_key, "identical", points=len(source.values)))


def draw_panels(page: Page) -> None:
    """Draw the curves of the first ``MAX_DRAWN`` differing series (the page's order is final)."""
    for panel in page.differing[:MAX_DRAWN]:
        panels.draw(panel)


def pattern_facts(patterns: dict[str, list[str]]) -> list[tuple[str, str]]:
    facts = []
    for source, words in (("default", "default exclude patterns"), ("card", "card exclude"), ("cli", "--exclude"),
                          ("include", "included back")):
        if patterns.get(source):
            facts.append((words, ", ".join(patterns[source])))
    return facts


_ENV_LINE = re.compile(r"^(?P<field>[^:]+): standard (?P<old>.*), here (?P<new>.*)$")


def environment_rows(lines: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The environment-difference lines of ``env.provenance`` as (field, standard, here) rows; the
    lines that are not of that shape are returned apart."""
    rows, other = [], []
    for line in lines:
        m = _ENV_LINE.match(line)
        if m:
            rows.append((m["field"], m["old"], m["new"]))
        else:
            other.append(line)
    return rows, other


def failed_runs(page: Page, states: list[Any]) -> None:
    from detaudit.run.local import log_tail

    for s in states:
        if not s.ok:
            tail = log_tail(s.spec.log_path)
            page.notes.append(f"run {s.spec.index + 1}: {s.status} (exit code {s.returncode}); log {s.spec.log_path}"
                              + ("\n" + tail if tail else ""))
