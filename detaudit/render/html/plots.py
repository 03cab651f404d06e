"""The page's static plots: matplotlib SVG, inline, byte-identical for the same inputs.

Determinism: no date or creator in the SVG metadata, ``svg.hashsalt`` fixed per figure (ids
are hashes of it; a salt per figure also keeps ids unique among the page's SVGs), text as
``<text>`` (``svg.fonttype: none``, no glyph outlines), and the XML prolog, DOCTYPE and
namespace URLs dropped for inline use (nothing in the page names a host).

matplotlib is imported here only, when a page is written (the ``plot`` extra).
"""

from __future__ import annotations

import io
import os
import re
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from detaudit.errors import InputError

if TYPE_CHECKING:
    from detaudit.render.html.views import Panel

# The runs' colours (reference first), the first-divergence marker's, the difference curves'.
RUN_COLOURS = ("#1f5fbf", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#5c940d", "#862e9c")
MARK_COLOUR = "#e03131"
DIFF_COLOURS = ("#343a40", "#f08c00")

_RC = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 8.5,
    "axes.titlesize": 9,
    "axes.labelsize": 8.5,
    "legend.fontsize": 7.5,
    "path.simplify": True,
    "axes.grid": True,
    "axes.grid.axis": "y",  # gridlines and tick marks are drawn per tick: what a plot costs is mostly its ticks
    "xtick.bottom": False,
    "ytick.left": False,
    "grid.color": "#e9ecef",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


_WARMING: list[threading.Thread] = []  # the import started by warm_up, joined before any drawing


def _matplotlib() -> Any:
    while _WARMING:  # never draw (nor fork a plot worker) while another thread is importing
        _WARMING.pop().join()
    try:
        import matplotlib
    except ImportError:
        raise InputError(None, "--html needs matplotlib: pip install 'detaudit[plot]'") from None
    return matplotlib


def _import_plotting() -> None:
    import matplotlib.backends.backend_svg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import matplotlib.ticker  # noqa: F401


def require_matplotlib() -> None:
    """Fail before any run when the page could not be drawn; then import the plotting modules in
    a thread (about a second) while the command runs or reads its metrics, most of which happens
    in other processes, so that the page adds less to the command's time."""
    _matplotlib()
    if not _WARMING:
        thread = threading.Thread(target=_import_plotting, name="detaudit-html-import", daemon=True)
        thread.start()
        _WARMING.append(thread)


_PROLOG = re.compile(r"\A.*?(?=<svg)", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(?::xlink)?="[^"]*"')
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)
_LONG_DECIMALS = re.compile(r"(\d\.\d)\d+")
_PATH_DATA = re.compile(r'( d=")([^"]*)(")')


def _inline(svg: str, css_class: str) -> str:
    """An SVG file's text made fit to sit in HTML: no prolog or DOCTYPE, no namespace URLs, no
    metadata, path coordinates to 0.1 pt (a tenth of a point is below any screen's pixel)."""
    svg = _PROLOG.sub("", svg, count=1)
    svg = _NAMESPACES.sub("", svg)
    svg = _METADATA.sub("", svg)
    svg = _PATH_DATA.sub(lambda m: m.group(1) + _LONG_DECIMALS.sub(r"\1", m.group(2)) + m.group(3), svg)
    return svg.replace("<svg ", f'<svg class="{css_class}" role="img" ', 1).strip()


def _save(fig: Any, salt: str, css_class: str) -> str:
    matplotlib = _matplotlib()
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return _inline(buffer.getvalue(), css_class)


def _figure(size: tuple[float, float]) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=72)


def _finite(y: np.ndarray) -> bool:
    return bool(np.isfinite(y).any())


def _decade(value: float, _position: Any) -> str:
    return f"{value:.0e}"  # plain text: matplotlib's default log labels are mathtext, parsed on every draw


def _rescale(axes: Any) -> None:
    """Limits from this plot's data alone (never left over from the previous plot on these axes)."""
    axes.set_autoscale_on(True)
    axes.relim()
    if not np.all(np.isfinite(axes.dataLim.get_points())):
        axes.set_xlim(0.0, 1.0)
        axes.set_ylim(*((1e-16, 1.0) if axes.get_yscale() == "log" else (0.0, 1.0)))
        return
    axes.autoscale_view()


class Plotter:
    """Draws a page's plots on figures made once and reused (making axes and their ticks is most of
    the cost of a small matplotlib plot): every panel is drawn on the same two-axes figure (or the
    one-axes figure when it has no difference to show), every sparkline on one small figure.
    A page draws its plots in a fixed order, so reuse keeps the page byte-identical."""

    def __init__(self) -> None:
        matplotlib = _matplotlib()
        from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

        self._rc = matplotlib.rc_context(_RC)
        self._rc.__enter__()
        self.pair = _figure((7.2, 4.4))
        self.top, self.bottom = self.pair.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2], "hspace": 0.08})
        self.bottom.set_yscale("log")
        self.bottom.yaxis.set_major_locator(LogLocator(numticks=6))
        self.bottom.yaxis.set_minor_locator(NullLocator())
        self.bottom.yaxis.set_major_formatter(FuncFormatter(_decade))
        self.bottom.set_ylabel("|difference|")
        self.top.set_ylabel("value")
        self.pair.subplots_adjust(left=0.1, right=0.98, top=0.97, bottom=0.1)
        self.single = _figure((7.2, 2.7))
        self.alone = self.single.subplots(1, 1)
        self.alone.set_ylabel("value")
        self.single.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.17)
        for axes in (self.top, self.alone):
            axes.yaxis.set_major_locator(MaxNLocator(5))
        for axes in (self.bottom, self.alone):
            axes.xaxis.set_major_locator(MaxNLocator(8))
        self.spark_figure = _figure((1.8, 0.32))
        self.spark_axes = self.spark_figure.add_axes((0.01, 0.06, 0.98, 0.88))
        self.spark_axes.set_axis_off()

    def close(self) -> None:
        self._rc.__exit__(None, None, None)

    def __enter__(self) -> Plotter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def _locator(bins: int, integer: bool) -> Any:
        from matplotlib.ticker import MaxNLocator

        return MaxNLocator(bins, integer=integer)

    @staticmethod
    def _clear(axes: Any) -> None:
        for artist in list(axes.lines) + list(axes.texts):
            artist.remove()

    def panel_svg(self, panel: Panel, salt: str) -> str:
        """The curves of every run over steps (the first divergence marked) and, below, the absolute
        and relative difference of each run from the reference on a log scale."""
        has_diff = any(_finite(d.absolute) or _finite(d.relative) for d in panel.diffs)
        fig, top, bottom = (self.pair, self.top, self.bottom) if has_diff else (self.single, self.alone, None)
        for axes in (top, bottom):
            if axes is not None:
                self._clear(axes)
        for i, curve in enumerate(panel.curves):
            colour = RUN_COLOURS[i % len(RUN_COLOURS)]
            top.plot(curve.x, curve.y, color=colour, lw=1.6 if i == 0 else 1.0, alpha=0.9)
            if len(curve.x) <= 40:
                top.plot(curve.x, curve.y, ls="none", marker="o", ms=2.6, color=colour)
        first = panel.divergence
        if first is not None and first.x is not None:
            for axes in (top, bottom):
                if axes is not None:
                    axes.axvline(first.x, color=MARK_COLOUR, lw=1.0, ls="--")
            marks = [y for y in first.y if y is not None and np.isfinite(y)]
            if marks:
                top.plot([first.x] * len(marks), marks, ls="none", marker="o", ms=5, mfc="none", mec=MARK_COLOUR,
                         mew=1.2)
            top.annotate(f"first divergence: {first.step_text} ({first.kind})", xy=(first.x, 1.0),
                         xycoords=("data", "axes fraction"), xytext=(4, -10), textcoords="offset points",
                         color=MARK_COLOUR, fontsize=7.5, va="top")
        integral = all(np.all(np.mod(c.x, 1) == 0) for c in panel.curves)
        (bottom if bottom is not None else top).xaxis.set_major_locator(self._locator(8, integer=integral))
        if bottom is not None:
            for j, d in enumerate(panel.diffs):
                dash = "-" if j == 0 else (0, (4, 2))
                if _finite(d.absolute):
                    bottom.plot(d.x_abs, d.absolute, color=DIFF_COLOURS[0], lw=1.0, ls=dash)
                if _finite(d.relative):
                    bottom.plot(d.x_rel, d.relative, color=DIFF_COLOURS[1], lw=1.0, ls=dash)
            bottom.set_xlabel(panel.x_label)
        else:
            top.set_xlabel(panel.x_label)
        for axes in (top, bottom):
            if axes is not None:
                _rescale(axes)
        return _save(fig, salt, "plot")

    def sparkline_svg(self, x: np.ndarray, y: np.ndarray, salt: str) -> str:
        """A small line of an identical series: its shape, no axes."""
        axes = self.spark_axes
        self._clear(axes)
        axes.plot(x, y, color=RUN_COLOURS[0], lw=0.9)
        if len(x) == 1:
            axes.plot(x, y, ls="none", marker="o", ms=2, color=RUN_COLOURS[0])
        _rescale(axes)
        return _save(self.spark_figure, salt, "spark")


# --- drawing a page's plots, in two processes when there are many ----------------------------------

# Below this many plots a second process costs more (fork, a second set of figures) than it saves.
PARALLEL_MIN_PLOTS = 8
Job = tuple[str, str, Any]  # ("panel", salt, Panel) or ("spark", salt, (x, y))


class PlotJobs:
    """Stands in for a Plotter on a first pass over the page: notes each plot the page will hold."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def panel_svg(self, panel: Panel, salt: str) -> str:
        self.jobs.append(("panel", salt, panel))
        return ""

    def sparkline_svg(self, x: np.ndarray, y: np.ndarray, salt: str) -> str:
        self.jobs.append(("spark", salt, (x, y)))
        return ""


class Drawn:
    """Stands in for a Plotter on the second pass: the plots, drawn (keyed by their salt)."""

    def __init__(self, svgs: dict[str, str]) -> None:
        self.svgs = svgs

    def panel_svg(self, panel: Panel, salt: str) -> str:
        return self.svgs[salt]

    def sparkline_svg(self, x: np.ndarray, y: np.ndarray, salt: str) -> str:
        return self.svgs[salt]


def _draw(jobs: list[Job]) -> list[str]:
    with Plotter() as plotter:
        return [plotter.panel_svg(job, salt) if kind == "panel" else plotter.sparkline_svg(job[0], job[1], salt)
                for kind, salt, job in jobs]


_SHARE: list[Job] = []  # the jobs a forked worker draws (inherited, never pickled)


def _draw_share() -> list[str]:
    return _draw(_SHARE)


def draw_all(jobs: list[Job]) -> dict[str, str]:
    """Every plot's SVG by salt. With many plots and two or more CPUs, a forked process draws every
    other plot while this one draws the rest; each plot's SVG depends only on its own data (the
    axes are rescaled, the artists replaced), so the page is the same either way
    (``DETAUDIT_JOBS=1``: one process)."""
    _matplotlib()
    parallel = (len(jobs) >= PARALLEL_MIN_PLOTS and (os.cpu_count() or 1) >= 2
                and os.environ.get("DETAUDIT_JOBS") != "1" and hasattr(os, "fork"))
    if not parallel:
        svgs = _draw(jobs)
        return {salt: svg for (_, salt, _), svg in zip(jobs, svgs, strict=False)}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    mine, theirs = jobs[0::2], jobs[1::2]
    _SHARE[:] = theirs
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            future = pool.submit(_draw_share)
            drawn = _draw(mine)
            other = future.result()
    finally:
        _SHARE.clear()
    out = {salt: svg for (_, salt, _), svg in zip(mine, drawn, strict=False)}
    out.update({salt: svg for (_, salt, _), svg in zip(theirs, other, strict=False)})
    return out
