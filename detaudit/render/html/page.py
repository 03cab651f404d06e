"""A ``Page`` as one self-contained HTML file: styles, chart data and scripts inline, nothing
fetched. The vendored uPlot (``assets/``, MIT, see ``assets/uPlot.LICENSE``) draws each drawn
series' charts in the browser, zoomable with a hover readout; without JavaScript the page is its
tables and text (every figure is in them) and the sparklines, which are inline SVG.

Plain Python: no numpy, no matplotlib; the page works on the base install.

Every text from the user's files is escaped twice over: as HTML, and as one line (control
characters and lone surrogates as their Python escapes, ``render.escapes``), so that no name
can break the page's structure or the UTF-8 it is written in.

The same page gives the same bytes: no dates, floats in the chart data written with fixed
precision.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

from detaudit import __version__
from detaudit.render.escapes import one_line, visible_lines
from detaudit.render.html.charts import DIFF_COLOURS, MARK_COLOUR, RUN_COLOURS, chart_data, json_script, sparkline_svg
from detaudit.render.html.findings import FindingRow, FindingsView
from detaudit.render.html.model import FirstDivergence, Page, Panel, TraceView
from detaudit.render.html.page_parts import MAX_DRAWN, MAX_SPARKS

UPLOT_VERSION = "1.6.32"
_BANNER = re.compile(r"\A/\*!.*?\*/\s*", re.S)


def _asset(name: str) -> str:
    return (files("detaudit.render.html") / "assets" / name).read_text(encoding="utf-8")


def _uplot_script() -> str:
    """uPlot with its licence as a comment (its one-line banner names a web address: dropped)."""
    licence = _asset("uPlot.LICENSE").strip().replace("*/", "* /")
    return f"/* uPlot {UPLOT_VERSION}\n{licence}\n*/\n" + _BANNER.sub("", _asset("uPlot.iife.min.js"), count=1)


def _e(text: Any) -> str:
    """One line of text, as HTML."""
    return html.escape(one_line(str(text)), quote=True)


def _e_lines(text: Any) -> str:
    """Text of several lines (a log tail), as HTML: its newlines kept (the notes are pre-wrapped)."""
    return html.escape(visible_lines(str(text)), quote=True)


def _slug(index: int, name: str) -> str:
    return f"s{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60]


# --- sections ------------------------------------------------------------------------------------


def _facts(rows: Iterable[tuple[str, str]]) -> str:
    return "<dl class=\"facts\">" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def _divergence_table(d: FirstDivergence) -> str:
    cells = [("kind", d.kind), ("first divergent step", d.step_text)]
    cells += [(f"{label}", value) for label, value in d.values]
    cells += [("abs diff", _num(d.abs_diff)), ("rel diff", _num(d.rel_diff)),
              ("ULPs", "" if d.ulps is None else str(d.ulps))]
    if d.runs:
        cells.append(("differs in", d.runs))
    head = "".join(f"<th>{_e(k)}</th>" for k, _ in cells)
    body = "".join(f"<td class=\"num\">{_e(v)}</td>" for _, v in cells)
    return f"<table class=\"first\"><tr>{head}</tr><tr>{body}</tr></table>"


def _panel_html(panel: Panel, index: int) -> str:
    d = panel.divergence
    attrs = f' data-series="{_e(panel.name)}" data-state="{_e(panel.state)}"'
    if d is not None:
        attrs += f' data-kind="{_e(d.kind)}" data-first-step="{_e(d.step)}" data-step-key="{_e(panel.step_key)}"'
    kind = d.kind if d is not None else panel.state
    label = {"within-tolerance": "within tolerance"}.get(panel.state, kind)
    parts = [f'<article class="series" id="{_slug(index, panel.name)}"{attrs}>',
             f'<h3>{_e(panel.name)}<span class="kind {_e(panel.state if panel.state == "within-tolerance" else kind)}">'
             f"{_e(label)}</span></h3>"]
    if d is not None:
        if d.summary:
            parts.append(f'<p class="summary">{_e(d.summary)}</p>')
        parts.append(_divergence_table(d))
    if panel.note:
        parts.append(f'<p class="note">{_e(panel.note)}</p>')
    data = chart_data(panel)
    if data is not None:
        sizes = ", ".join(f"{c.label} {c.points} points" for c in panel.curves)
        drawn = sum(len(c.x) for c in panel.curves)
        full = sum(c.points for c in panel.curves)
        sampled = f"; drawn from {drawn} of {full} points (min/max per bucket, every point near the first divergence)" \
            if drawn < full else ""
        parts.append('<figure class="chart"><div class="interactive"><noscript>The curves are drawn by the page\'s '
                     "script (JavaScript is off): the figures above are the full record.</noscript></div>"
                     f"<figcaption>{_legend(panel)}<br>{_e(sizes)}{_e(sampled)}"
                     + (f"; the dashed red line marks {_e(d.step_text)}" if d is not None and d.x is not None else "")
                     + '<span class="hint">; drag to zoom, double-click to reset</span></figcaption></figure>')
        parts.append(f'<script type="application/json" class="chart-data">{json_script(data)}</script>')
    parts.append("</article>")
    return "".join(parts)


def _more_differing_html(more: list[Panel], start: int) -> str:
    """The differing series past the drawn ones: one row each, the figures of its first divergence."""
    if not more:
        return ""
    rows = []
    for i, p in enumerate(more, start=start):
        d = p.divergence
        attrs = f' data-series="{_e(p.name)}" data-state="{_e(p.state)}"'
        cells = [f"<td><code>{_e(p.name)}</code></td>"]
        if d is not None:
            attrs += f' data-kind="{_e(d.kind)}" data-first-step="{_e(d.step)}" data-step-key="{_e(p.step_key)}"'
            values = "; ".join(f"{label} {value}" for label, value in d.values)
            cells += [f"<td>{_e(d.kind)}</td>", f"<td class=\"num\">{_e(d.step_text)}</td>", f"<td class=\"mono\">{_e(values)}</td>",
                      f"<td class=\"num\">{_num(d.abs_diff)}</td>", f"<td class=\"num\">{_num(d.rel_diff)}</td>",
                      f"<td class=\"num\">{'' if d.ulps is None else d.ulps}</td>"]
        else:
            cells += [f"<td>{_e(p.state)}</td>", "<td></td>", f"<td class=\"note\">{_e(p.note)}</td>", "<td></td>",
                      "<td></td>", "<td></td>"]
        rows.append(f'<tr id="{_slug(i, p.name)}"{attrs}>' + "".join(cells) + "</tr>")
    return (f"<p class=\"note\">{len(more)} more differing series, past the first {start} drawn: each with its first "
            "divergence (every one is in the command's --json)</p><table class=\"more-differing\"><tr><th>series</th>"
            "<th>kind</th><th>first divergent step</th><th>values there</th><th>abs diff</th><th>rel diff</th>"
            "<th>ULPs</th></tr>" + "".join(rows) + "</table>")


def _legend(panel: Panel) -> str:
    """The chart's key, in HTML."""
    keys = [(RUN_COLOURS[i % len(RUN_COLOURS)], "solid", c.label) for i, c in enumerate(panel.curves)]
    for j, d in enumerate(panel.diffs):
        style = "solid" if j == 0 else "dashed"
        keys += [(DIFF_COLOURS[0], style, f"abs diff {d.label}"), (DIFF_COLOURS[1], style, f"rel diff {d.label}")]
    if panel.divergence is not None and panel.divergence.x is not None:
        keys.append((MARK_COLOUR, "dashed", f"first divergence ({panel.divergence.step_text})"))
    return " ".join(f'<span class="key"><span class="swatch" style="border-top: 2px {style} {colour}"></span>{_e(label)}</span>'
                    for colour, style, label in keys)


def _identical_html(panels: list[Panel]) -> str:
    if not panels:
        return "<p class=\"note\">none</p>"
    rows = []
    for p in panels:
        spark = sparkline_svg(p.spark) if p.spark is not None else ""
        points = "" if p.points is None else str(p.points)
        rows.append(f'<tr data-series="{_e(p.name)}"><td><code>{_e(p.name)}</code></td><td class="num">{points}</td>'
                    f"<td>{spark}</td><td class=\"note\">{_e(p.note)}</td></tr>")
    more = len(panels) - MAX_SPARKS
    note = f"<p class=\"note\">shapes drawn for the first {MAX_SPARKS}; {more} more listed</p>" if more > 0 else ""
    return (f"{note}<table class=\"identical\"><tr><th>series</th><th>points</th><th>shape</th><th></th></tr>"
            + "".join(rows) + "</table>")


def _root_html(page: Page, anchors: dict[str, str]) -> str:
    if not page.root:
        return ""
    items = "".join(f'<li><a href="#{anchors.get(name, "")}">{_e(name)}</a> @ {_e(where)}</li>'
                    for name, where in page.following)
    follows = (f"<p>then, in the order they first differ ({len(page.following)}):</p><ol class=\"following\">{items}</ol>"
               if page.following else "")
    return f'<section id="root"><h2>Root divergence</h2><p class="root">{_e(page.root)}</p>{follows}</section>'


def _environment_html(page: Page) -> str:
    old, new = page.environment_labels
    if page.environment:
        rows = "".join(f"<tr><td><code>{_e(f)}</code></td><td class=\"mono\">{_e(a)}</td><td class=\"mono\">{_e(b)}</td></tr>"
                       for f, a, b in page.environment)
        body = f"<table class=\"environment\"><tr><th>field</th><th>{_e(old)}</th><th>{_e(new)}</th></tr>{rows}</table>"
    else:
        body = f"<p class=\"note\">{_e(page.environment_note or 'nothing differs')}</p>"
    return f'<section id="environment"><h2>Environment: what differs</h2>{body}</section>'


def _trace_html(view: TraceView | None) -> str:
    if view is None:
        return ""
    lines = "".join(f'<li class="trace-line {_e(style)}">{_e(text)}</li>' for style, text in view.lines)
    table = ""
    if view.processes:
        rows = "".join(f"<tr><td>{_e(p)}</td><td class=\"mono\">{_e(d)}</td><td class=\"mono\">{_e(m)}</td></tr>"
                       for p, d, m in view.processes)
        table = (f"<p>per process ({_e(view.labels[0])} vs {_e(view.labels[1])}):</p><table class=\"processes\">"
                 f"<tr><th>process</th><th>first differing draw</th><th>first differing module</th></tr>{rows}</table>")
    note = f"<p class=\"note\">{_e(view.note)}</p>" if view.note else ""
    return f'<section id="trace"><h2>Trace: RNG draws and modules</h2><ul>{lines}</ul>{table}{note}</section>'


def _finding_rows(rows: list[FindingRow], matched: bool) -> str:
    body = "".join(
        f"<tr><td class=\"mono\">{_e(r.where)}</td><td>{_e(r.rule)}</td><td class=\"sev-{_e(r.severity)}\">{_e(r.severity)}</td>"
        f"<td>{_e(r.message)}<br><code>{_e(r.code)}</code><br><span class=\"note\">{_e(r.processes)}</span>"
        + (f"<br>ran in this run: {_e(', '.join(r.matched))}" if matched else "") + "</td></tr>" for r in rows)
    table = "findings" if matched else "findings-others"
    return f"<table class=\"{table}\"><tr><th>where</th><th>rule</th><th>severity</th><th>finding</th></tr>{body}</table>"


def _findings_html(view: FindingsView | None) -> str:
    if view is None:
        return ""
    parts = [f'<section id="scan"><h2>scan-rng findings</h2><p class="note">{_e(view.source)}: {_e(view.note)}</p>']
    if view.matched:
        parts.append(_finding_rows(view.matched, True))
    if view.others:
        title = "findings" if not view.matched and "not traced" in view.note else "findings in no process of this run"
        parts.append(f"<details{' open' if 'not traced' in view.note else ''}><summary>{len(view.others)} {_e(title)}"
                     f"</summary>{_finding_rows(view.others, False)}</details>")
    parts.append("</section>")
    return "".join(parts)


def _excluded_html(page: Page) -> str:
    if not page.excluded:
        return "<p class=\"note\">series left out of the comparison: none</p>"
    rows = "".join(f"<tr data-left-out=\"{_e(n)}\"><td><code>{_e(n)}</code></td><td>{_e(r)}</td></tr>"
                   for n, r in page.excluded)
    return (f"<details><summary>{len(page.excluded)} series left out of the comparison, and why (not compared: "
            f"neither passed nor failed)</summary><table class=\"excluded\"><tr><th>series</th><th>left out by</th></tr>"
            f"{rows}</table></details>")


def _body(page: Page, level: int = 1) -> str:
    """The page's sections."""
    h = f"h{level}"
    status = "ok" if page.ok else "bad"
    parts = [f'<header class="verdict {status}"><{h}>{_e(page.verdict)}</{h}><p>{_e(page.headline)}</p>'
             f'<p class="command">{_e(page.title)}</p></header>']
    parts.append(f'<section id="compared"><h2>What was compared</h2>{_facts(page.facts)}{_excluded_html(page)}</section>')
    if page.notes:
        parts.append('<section id="notes"><ul class="notes">' + "".join(f"<li>{_e_lines(n)}</li>" for n in page.notes)
                     + "</ul></section>")
    if page.cards:
        rows = "".join(f"<tr><td><a href=\"#card-{i}\">{_e(name)}</a></td><td>{_e(status_)}</td><td>{_e(detail)}</td></tr>"
                       for i, (name, status_, detail, _) in enumerate(page.cards))
        parts.append(f"<section id=\"cards\"><h2>Cards</h2><table class=\"cards\"><tr><th>card</th><th>status</th><th>detail</th></tr>{rows}"
                     "</table></section>")
        for i, (_, _, _, sub) in enumerate(page.cards):
            if sub is not None:
                parts.append(f'<section class="card" id="card-{i}">{_body(sub, 2)}</section>')
        return "".join(parts)
    anchors = {p.name: _slug(i, p.name) for i, p in enumerate(page.differing)}
    parts.append(_root_html(page, anchors))
    if page.differing:
        drawn = page.differing[:MAX_DRAWN]
        parts.append(f'<section id="differing"><h2>Differing series ({len(page.differing)})</h2>')
        parts += [_panel_html(p, i) for i, p in enumerate(drawn)]
        parts.append(_more_differing_html(page.differing[MAX_DRAWN:], len(drawn)))
        parts.append("</section>")
    parts.append(f'<section id="identical"><h2>Identical series ({len(page.identical)})</h2>'
                 f"{_identical_html(page.identical)}</section>")
    parts.append(_environment_html(page))
    parts.append(_trace_html(page.trace))
    parts.append(_findings_html(page.findings))
    return "".join(parts)


def render_page(page: Page) -> str:
    """The page's HTML text (the same page, the same bytes)."""
    body = _body(page)
    scripts = _uplot_script() + "\n" + _asset("report.js")
    if "</script" in scripts.lower():  # would end the inline script early
        raise ValueError("an inline script holds '</script'")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(page.verdict)}: {_e(page.title)}</title>"
            f"<style>{_asset('uPlot.min.css')}\n{_asset('report.css')}</style></head>\n<body>\n{body}\n"
            f"<footer>detaudit {_e(__version__)}. Charts: uPlot {UPLOT_VERSION} (MIT licence), drawn by the page's "
            "script. Self-contained: nothing on this page is fetched.</footer>\n"
            f"<script>{scripts}</script>\n</body></html>\n")
