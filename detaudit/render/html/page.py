"""A ``Page`` as one self-contained HTML file: styles, plots (inline SVG) and scripts inline,
nothing fetched. Readable without JavaScript (the SVGs, tables and text are the page); with
it, the vendored uPlot (``assets/``, MIT, see ``assets/uPlot.LICENSE``) makes each differing
series' charts zoomable with a hover readout.

The same page gives the same bytes: no dates, SVG ids salted per plot, floats in the chart
data written with fixed precision.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

import numpy as np

from detaudit import __version__
from detaudit.render.html import plots
from detaudit.render.html.findings import FindingRow, FindingsView
from detaudit.render.html.views import FirstDivergence, Page, Panel, TraceView

UPLOT_VERSION = "1.6.32"
_BANNER = re.compile(r"\A/\*!.*?\*/\s*", re.S)


def _asset(name: str) -> str:
    return (files("detaudit.render.html") / "assets" / name).read_text(encoding="utf-8")


def _uplot_script() -> str:
    """uPlot with its licence as a comment (its one-line banner names a web address: dropped)."""
    licence = _asset("uPlot.LICENSE").strip().replace("*/", "* /")
    return f"/* uPlot {UPLOT_VERSION}\n{licence}\n*/\n" + _BANNER.sub("", _asset("uPlot.iife.min.js"), count=1)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _slug(index: int, name: str) -> str:
    return f"s{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60]


# --- chart data for the interactive view -----------------------------------------------------


def _number(v: float, digits: int) -> float | None:
    if not math.isfinite(v):
        return None
    return float(format(v, f".{digits}g"))


def _column(y: np.ndarray, digits: int) -> list[float | None]:
    return [_number(float(v), digits) for v in y]


def _aligned(xs: list[np.ndarray], ys: list[np.ndarray], digits: int) -> tuple[list[float], list[list[float | None]]] | None:
    """Curves on one x grid (uPlot's data shape); None when a curve's x does not only grow."""
    if any(len(x) > 1 and not np.all(np.diff(x) > 0) for x in xs):
        return None
    grid = np.unique(np.concatenate(xs)) if xs else np.array([])
    columns = []
    for x, y in zip(xs, ys, strict=False):
        full = np.full(len(grid), np.nan)
        full[np.searchsorted(grid, x)] = y
        columns.append(_column(full, digits))
    return [float(v) for v in grid], columns


def chart_data(panel: Panel) -> dict[str, Any] | None:
    if not panel.curves:
        return None
    values = _aligned([c.x for c in panel.curves], [c.y for c in panel.curves], 10)
    if values is None:
        return None
    doc: dict[str, Any] = {
        "xLabel": panel.x_label,
        "integral": all(bool(np.all(np.mod(c.x, 1) == 0)) for c in panel.curves),
        "first": panel.divergence.x if panel.divergence is not None else None,
        "firstText": f"first divergence: {panel.divergence.step_text} ({panel.divergence.kind})"
        if panel.divergence is not None else "",
        "values": {"x": values[0], "curves": [{"label": c.label, "y": y} for c, y in zip(panel.curves, values[1], strict=False)]},
        "diff": None,
    }
    xs, ys, meta = [], [], []
    for j, d in enumerate(panel.diffs):
        for rel, x, y in ((False, d.x_abs, d.absolute), (True, d.x_rel, d.relative)):
            if np.isfinite(y).any():
                xs.append(x)
                ys.append(y)
                meta.append({"label": f"{'rel' if rel else 'abs'} {d.label}", "rel": rel, "dashed": j > 0})
    if xs:
        diff = _aligned(xs, ys, 4)
        if diff is not None:
            doc["diff"] = {"x": diff[0], "curves": [dict(m, y=y) for m, y in zip(meta, diff[1], strict=False)]}
    return doc


def _json_script(doc: Any) -> str:
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


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


def _panel_html(panel: Panel, index: int, salt: str, plotter: Any) -> str:
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
    if panel.curves:
        svg = plotter.panel_svg(panel, f"{salt}-{index}")
        data = chart_data(panel)
        sizes = ", ".join(f"{c.label} {c.points} points" for c in panel.curves)
        legend = _legend(panel)
        drawn = sum(len(c.x) for c in panel.curves)
        full = sum(c.points for c in panel.curves)
        sampled = f"; drawn from {drawn} of {full} points (min/max per bucket, every point near the first divergence)" \
            if drawn < full else ""
        parts.append('<figure class="chart"><div class="static">' + svg + '</div><div class="interactive" hidden></div>'
                     f"<figcaption>{legend}<br>{_e(sizes)}{_e(sampled)}"
                     + (f"; the dashed red line marks {_e(d.step_text)}" if d is not None and d.x is not None else "")
                     + '<span class="hint">; drag to zoom, double-click to reset</span></figcaption></figure>')
        if data is not None:
            parts.append(f'<script type="application/json" class="chart-data">{_json_script(data)}</script>')
    parts.append("</article>")
    return "".join(parts)


def _legend(panel: Panel) -> str:
    """The plot's key, in HTML (drawn by matplotlib it would cost more than the plot)."""
    keys = [(plots.RUN_COLOURS[i % len(plots.RUN_COLOURS)], "solid", c.label) for i, c in enumerate(panel.curves)]
    for j, d in enumerate(panel.diffs):
        style = "solid" if j == 0 else "dashed"
        keys += [(plots.DIFF_COLOURS[0], style, f"abs diff {d.label}"), (plots.DIFF_COLOURS[1], style, f"rel diff {d.label}")]
    if panel.divergence is not None and panel.divergence.x is not None:
        keys.append((plots.MARK_COLOUR, "dashed", f"first divergence ({panel.divergence.step_text})"))
    return " ".join(f'<span class="key"><span class="swatch" style="border-top: 2px {style} {colour}"></span>{_e(label)}</span>'
                    for colour, style, label in keys)


def _identical_html(panels: list[Panel], salt: str, plotter: Any) -> str:
    if not panels:
        return "<p class=\"note\">none</p>"
    rows = []
    for i, p in enumerate(panels):
        spark = ""
        if p.spark is not None and len(p.spark.x):
            spark = plotter.sparkline_svg(p.spark.x, p.spark.y, f"{salt}-spark-{i}")
        points = str(p.spark.points) if p.spark is not None else ""
        rows.append(f'<tr data-series="{_e(p.name)}"><td><code>{_e(p.name)}</code></td><td class="num">{points}</td>'
                    f"<td>{spark}</td><td class=\"note\">{_e(p.note)}</td></tr>")
    return ("<table class=\"identical\"><tr><th>series</th><th>points</th><th>shape</th><th></th></tr>"
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


def _body(page: Page, salt: str, plotter: Any, level: int = 1) -> str:
    """The page's sections; ``plotter`` draws (or, on a first pass, notes) each plot."""
    h = f"h{level}"
    status = "ok" if page.ok else "bad"
    parts = [f'<header class="verdict {status}"><{h}>{_e(page.verdict)}</{h}><p>{_e(page.headline)}</p>'
             f'<p class="command">{_e(page.title)}</p></header>']
    parts.append(f'<section id="compared"><h2>What was compared</h2>{_facts(page.facts)}')
    if page.excluded:
        rows = "".join(f"<tr><td><code>{_e(n)}</code></td><td>{_e(r)}</td></tr>" for n, r in page.excluded)
        parts.append(f"<details><summary>{len(page.excluded)} excluded series, and why</summary>"
                     f"<table class=\"excluded\"><tr><th>series</th><th>excluded by</th></tr>{rows}</table></details>")
    else:
        parts.append("<p class=\"note\">excluded series: none</p>")
    parts.append("</section>")
    if page.notes:
        parts.append('<section id="notes"><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in page.notes)
                     + "</ul></section>")
    if page.cards:
        rows = "".join(f"<tr><td><a href=\"#card-{i}\">{_e(name)}</a></td><td>{_e(status_)}</td><td>{_e(detail)}</td></tr>"
                       for i, (name, status_, detail, _) in enumerate(page.cards))
        parts.append(f"<section id=\"cards\"><h2>Cards</h2><table class=\"cards\"><tr><th>card</th><th>status</th><th>detail</th></tr>{rows}"
                     "</table></section>")
        for i, (_, _, _, sub) in enumerate(page.cards):
            if sub is not None:
                parts.append(f'<section class="card" id="card-{i}">{_body(sub, f"{salt}-c{i}", plotter, 2)}</section>')
        return "".join(parts)
    anchors = {p.name: _slug(i, p.name) for i, p in enumerate(page.differing)}
    parts.append(_root_html(page, anchors))
    if page.differing:
        parts.append(f'<section id="differing"><h2>Differing series ({len(page.differing)})</h2>')
        parts += [_panel_html(p, i, salt, plotter) for i, p in enumerate(page.differing)]
        parts.append("</section>")
    parts.append(f'<section id="identical"><h2>Identical series ({len(page.identical)})</h2>'
                 f"{_identical_html(page.identical, salt, plotter)}</section>")
    parts.append(_environment_html(page))
    parts.append(_trace_html(page.trace))
    parts.append(_findings_html(page.findings))
    return "".join(parts)


def render_page(page: Page) -> str:
    """The page's HTML text (the same page, the same bytes)."""
    jobs = plots.PlotJobs()
    _body(page, "detaudit", jobs)  # a first pass notes the plots, which are then drawn at once
    body = _body(page, "detaudit", plots.Drawn(plots.draw_all(jobs.jobs)))
    scripts = _uplot_script() + "\n" + _asset("report.js")
    if "</script" in scripts.lower():  # would end the inline script early
        raise ValueError("an inline script holds '</script'")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(page.verdict)}: {_e(page.title)}</title>"
            f"<style>{_asset('uPlot.min.css')}\n{_asset('report.css')}</style></head>\n<body>\n{body}\n"
            f"<footer>detaudit {_e(__version__)}. Plots: matplotlib (static SVG) and uPlot {UPLOT_VERSION} "
            "(interactive, MIT licence). Self-contained: nothing on this page is fetched.</footer>\n"
            f"<script>{scripts}</script>\n</body></html>\n")
