"""What the page's charts are drawn from: each drawn panel's data for uPlot (the vendored
script draws it in the browser) and each identical series' sparkline as a small inline SVG.

Deterministic: floats written with a fixed number of significant digits, SVG coordinates to a
tenth of a unit, nothing that depends on the time or the machine.
"""

from __future__ import annotations

import json
import math
from typing import Any

from detaudit.render.html import series as num
from detaudit.render.html.model import Curve, Panel

# The runs' colours (reference first), the first-divergence marker's, the difference curves'
# (report.js uses the same).
RUN_COLOURS = ("#1f5fbf", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#5c940d", "#862e9c")
MARK_COLOUR = "#e03131"
DIFF_COLOURS = ("#343a40", "#f08c00")
SPARK_SIZE = (130.0, 24.0)


def _number(v: float, digits: int) -> float | None:
    if not math.isfinite(v):
        return None
    return float(format(v, f".{digits}g"))


def _aligned(xs: list[list[float]], ys: list[list[float]], digits: int) -> tuple[list[float], list[list[float | None]]] | None:
    """Curves on one x grid (uPlot's data shape); None when a curve's x does not only grow."""
    if any(not num.increasing(x) for x in xs):
        return None
    grid = sorted(set().union(*xs)) if xs else []
    where = {v: i for i, v in enumerate(grid)}
    columns = []
    for x, y in zip(xs, ys, strict=True):
        column: list[float | None] = [None] * len(grid)
        for xv, yv in zip(x, y, strict=True):
            column[where[xv]] = _number(yv, digits)
        columns.append(column)
    return grid, columns


def chart_data(panel: Panel) -> dict[str, Any] | None:
    """A drawn panel's curves and differences for the interactive chart (None: nothing to draw)."""
    if not panel.curves:
        return None
    values = _aligned([c.x for c in panel.curves], [c.y for c in panel.curves], 10)
    if values is None:
        return None
    d = panel.divergence
    doc: dict[str, Any] = {
        "xLabel": panel.x_label,
        "integral": all(float(v).is_integer() for c in panel.curves for v in c.x),
        "first": d.x if d is not None else None,
        "firstText": f"first divergence: {d.step_text} ({d.kind})" if d is not None else "",
        "values": {"x": values[0], "curves": [{"label": c.label, "y": y} for c, y in zip(panel.curves, values[1], strict=True)]},
        "diff": None,
    }
    xs, ys, meta = [], [], []
    for j, diff in enumerate(panel.diffs):
        for rel, x, y in ((False, diff.x_abs, diff.absolute), (True, diff.x_rel, diff.relative)):
            if num.any_finite(y):
                xs.append(x)
                ys.append(y)
                meta.append({"label": f"{'rel' if rel else 'abs'} {diff.label}", "rel": rel, "dashed": j > 0})
    if xs:
        aligned = _aligned(xs, ys, 4)
        if aligned is not None:
            doc["diff"] = {"x": aligned[0], "curves": [dict(m, y=y) for m, y in zip(meta, aligned[1], strict=True)]}
    return doc


def json_script(doc: Any) -> str:
    """JSON that can sit inside a ``<script>`` element (no ``</script>`` can come out of it)."""
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def sparkline_svg(curve: Curve) -> str:
    """A small line of an identical series: its shape, no axes; gaps where a value is not finite."""
    width, height = SPARK_SIZE
    finite = [(x, y) for x, y in zip(curve.x, curve.y, strict=True) if math.isfinite(y)]
    if not finite:
        return ""
    x_lo, x_hi = min(x for x, _ in finite), max(x for x, _ in finite)
    y_lo, y_hi = min(y for _, y in finite), max(y for _, y in finite)
    x_span, y_span = (x_hi - x_lo) or 1.0, (y_hi - y_lo) or 1.0
    pad = 2.0

    def point(x: float, y: float) -> str:
        px = pad + (x - x_lo) / x_span * (width - 2 * pad)
        py = height - pad - ((y - y_lo) / y_span * (height - 2 * pad) if y_hi > y_lo else (height - 2 * pad) / 2)
        return f"{px:.1f},{py:.1f}"

    segments: list[list[str]] = [[]]
    for x, y in zip(curve.x, curve.y, strict=True):
        if math.isfinite(y):
            segments[-1].append(point(x, y))
        elif segments[-1]:
            segments.append([])
    shapes = []
    for segment in segments:
        if len(segment) == 1:
            cx, cy = segment[0].split(",")
            shapes.append(f'<circle cx="{cx}" cy="{cy}" r="1.2" fill="{RUN_COLOURS[0]}"/>')
        elif segment:
            shapes.append(f'<polyline points="{" ".join(segment)}" fill="none" stroke="{RUN_COLOURS[0]}" '
                          'stroke-width="1"/>')
    return (f'<svg class="spark" role="img" viewBox="0 0 {width:g} {height:g}" width="{width:g}" height="{height:g}">'
            + "".join(shapes) + "</svg>")
