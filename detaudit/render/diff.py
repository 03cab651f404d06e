"""``detaudit diff`` and the per-series divergence lines every other report reuses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from detaudit.data.compare import (
    ABSENT,
    CLOSE_REL_TOL,
    DiffReport,
    PairDivergence,
    RootDivergence,
    SeriesMismatch,
)
from detaudit.data.values import format_value
from detaudit.render.escapes import one_line
from detaudit.render.jsonout import dump_json, finite_or_none, json_value

if TYPE_CHECKING:
    from rich.table import Table

# rich.table (~6 ms) is imported by the table's own function: verify and an identical diff draw none.

_v = format_value  # every value that may be absent is shown by this one function


def num_text(x: float | int | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def kind_label(kind: str) -> str:
    """A divergence kind as people read it ("close" says how close)."""
    return f"close (rel <= {CLOSE_REL_TOL:g})" if kind == "close" else kind


def _ulps_text(d: PairDivergence) -> str:
    # ULPs tell "reduction order" apart from "different data" only for close floats.
    return num_text(d.ulps, "d") if d.kind == "close" else ""


def root_summary(root: RootDivergence) -> str:
    """One sentence: what was identical before the root divergence, and what differs there."""
    step_text = f"{root.step_key} {_v(root.step)}"
    if root.identical_through:
        before = ", ".join(f"{key} through {_v(step)}" for key, step in sorted(root.identical_through.items()))
        return f"all series identical before it ({before}); first difference {root.series} @ {step_text} ({root.kind})"
    return f"first difference at the very first point: {root.series} @ {step_text} ({root.kind})"


def _mismatch_document(m: SeriesMismatch) -> dict[str, Any]:
    first = m.first
    return {
        "series": m.series,
        "step_key": m.step_key,
        "step": json_value(m.step),
        "kind": m.kind,
        "values": [json_value(v) for v in m.values],
        "present": [v is not ABSENT for v in m.values],
        "abs_diff": finite_or_none(first.abs_diff),
        "rel_diff": finite_or_none(first.rel_diff),
        "ulps": first.ulps,
        "disagreeing_runs": [r + 1 for r in m.disagreeing_runs],
        "by_run": [
            {
                "run": p.run + 1,
                "index": p.index,
                "kind": p.kind,
                "step": json_value(p.step),
                "values": [json_value(p.value_a), json_value(p.value_b)],
                "points": [p.len_a, p.len_b],
            }
            for p in sorted(m.pairs, key=lambda p: p.run)
        ],
    }


def diff_document(report: DiffReport) -> dict[str, Any]:
    """The ``--json`` form of a diff report (strict JSON: non-finite floats encoded)."""
    root = report.root
    return {
        "runs": report.runs,
        "compared": len(report.compared),
        "identical_count": len(report.identical),
        "mismatched_count": len(report.mismatched),
        "identical": report.identical,
        "mismatched": [_mismatch_document(m) for m in report.mismatched],
        "root": None
        if root is None
        else {
            "series": root.series,
            "step_key": root.step_key,
            "step": json_value(root.step),
            "line": root.line,
            "run": root.run + 1,
            "identical_through": {k: json_value(v) for k, v in root.identical_through.items()},
            "summary": root_summary(root),
        },
        "excluded": report.excluded,
        "exclude_patterns": report.exclude_patterns,
        "torn_last_line": report.torn,
        "detected_step_keys": report.detected_step_keys,
    }


def diff_json(report: DiffReport) -> str:
    return dump_json(diff_document(report))


def names_text(names: list[str], limit: int = 60) -> str:
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += f", … (+{len(names) - limit} more; --json lists all)"
    return shown or "none"


def print_diff(report: DiffReport, console: Console, *, title: str = "detaudit diff") -> None:
    """The investigation view: counts and names, per-series first divergence, the root."""
    n_cmp, n_id, n_mm = len(report.compared), len(report.identical), len(report.mismatched)
    runs = report.runs
    console.print(f"[bold]{escape(title)}[/bold]: {len(runs)} runs, reference run 1 = {escape(runs[0])}")
    for i, label in enumerate(runs[1:], 2):
        console.print(f"  run {i} = {escape(label)}")
    style = "green" if n_mm == 0 else "red"
    console.print(f"[{style}]{n_id} / {n_cmp} identical, {n_mm} mismatched[/{style}]")
    console.print(f"identical: {escape(names_text(report.identical))}")
    if report.mismatched:
        console.print(f"mismatched: {escape(names_text([m.series for m in report.mismatched]))}")
    if report.excluded:
        console.print(f"excluded ({len(report.excluded)}): " + escape(names_text(sorted(report.excluded))))
        reasons = sorted(set(report.excluded.values()))
        console.print("  by: " + escape("; ".join(reasons)))
    else:
        console.print("excluded: none")
    if report.detected_step_keys:
        console.print(escape(detected_steps_line(report.detected_step_keys)))
    if report.mismatched:
        console.print(mismatch_table(report.mismatched, len(runs)))
    if report.root is not None:
        line = f" (line {report.root.line} of run {report.root.run + 1})" if report.root.line else ""
        console.print(f"[bold]root divergence[/bold]{escape(line)}: {escape(root_summary(report.root))}")


def detected_steps_line(keys: list[str]) -> str:
    """Which fields were taken as steps by detection (lines that name no step_key)."""
    return (f"steps: field {', '.join(map(repr, keys))}, detected (lines name no step_key; "
            "--step-key or a card's step_key chooses another)")


def mismatch_table(mismatched: list[SeriesMismatch], n_runs: int) -> Table:
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    table.add_column("series", overflow="fold")
    table.add_column("kind")
    table.add_column("first step", justify="right")
    for i in range(n_runs):
        table.add_column(f"run {i + 1}", justify="right", overflow="fold")
    table.add_column("abs diff", justify="right")
    table.add_column("rel diff", justify="right")
    table.add_column("ULPs", justify="right")
    if n_runs > 2:
        table.add_column("differs in", justify="right")
    for m in mismatched:
        first = m.first
        row = [escape(m.series), kind_label(first.kind), escape(f"{m.step_key} {_v(first.step)}")]
        row += [escape(_v(v)) for v in m.values]
        row += [num_text(first.abs_diff), num_text(first.rel_diff), _ulps_text(first)]
        if n_runs > 2:
            row.append(", ".join(f"run {r + 1}" for r in m.disagreeing_runs))
        table.add_row(*row)
    return table


def divergence_line(name: str, d: PairDivergence, left: str = "standard", right: str = "run") -> str:
    """One line per failing series: first divergent step, both values, the kind. One line whatever
    the name or the values hold (control characters escaped: ``render.escapes``)."""
    return one_line(_divergence_text(name, d, left, right))


def _divergence_text(name: str, d: PairDivergence, left: str, right: str) -> str:
    if d.kind == "missing":
        side = right if d.value_b is ABSENT else left
        return f"{name}: missing in the {side}"
    if d.kind == "steps" and (d.value_a is ABSENT or d.value_b is ABSENT):
        return f"{name}: {d.len_a} points in the {left}, {d.len_b} in the {right} (steps: first extra at step {_v(d.step)})"
    where = f"step {_v(d.step_a)}" if d.kind != "steps" else f"step {_v(d.step_a)} vs {_v(d.step_b)}"
    diff = ""
    if d.kind == "close":
        diff = f", abs diff {num_text(d.abs_diff)}, {num_text(d.ulps, 'd')} ULPs"
    elif d.kind == "value" and d.abs_diff is not None:
        diff = f", abs diff {num_text(d.abs_diff)}"
    return f"{name}: {where}: {left} {_v(d.value_a)}, {right} {_v(d.value_b)} ({kind_label(d.kind)}{diff})"


def divergence_document(name: str, d: PairDivergence) -> dict[str, Any]:
    """One failing series of a verify: where it first departs from the standard."""
    return {"series": name, "kind": d.kind, "step": json_value(d.step),
            "step_standard": json_value(d.step_a), "step_run": json_value(d.step_b),
            "standard": json_value(d.value_a), "run": json_value(d.value_b),
            "points": [d.len_a, d.len_b], "abs_diff": finite_or_none(d.abs_diff),
            "rel_diff": finite_or_none(d.rel_diff), "ulps": d.ulps,
            "summary": divergence_line(name, d)}

