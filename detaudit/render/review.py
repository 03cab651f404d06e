"""``detaudit standard diff`` and ``record --update``: the review of a change to a standard."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.data.values import format_value
from detaudit.render.diff import num_text
from detaudit.render.jsonout import dump_json
from detaudit.standards.diff import FieldChange, SeriesChange, StandardDiff

_SHOWN = 60  # characters of a field's value a review line shows

def _steps_text(steps: list[Any], limit: int = 6) -> str:
    shown = ", ".join(format_value(s) for s in steps[:limit])
    return shown + (f", … (+{len(steps) - limit})" if len(steps) > limit else "")


def change_line(change: SeriesChange) -> str:
    """One line per series change: what came, went, or where values first differ and by how much."""
    if change.status in ("added", "removed"):
        return f"{change.status}: {change.name} ({change.points_new or change.points_old} points)"
    if change.status == "identical":
        return f"identical: {change.name}"
    parts = []
    if change.differing:
        parts.append(
            f"{change.differing} of {min(change.points_old, change.points_new)} common points differ from step "
            f"{format_value(change.first_step)} ({change.kind}): {format_value(change.first_old)} -> "
            f"{format_value(change.first_new)}"
        )
        figures = [f"max abs diff {num_text(change.max_abs)}", f"max rel diff {num_text(change.max_rel)}"]
        if change.max_ulps is not None:
            figures.append(f"max {change.max_ulps} ULPs")
        parts.append(", ".join(figures))
    if change.steps_added:
        parts.append(f"steps added: {_steps_text(change.steps_added)}")
    if change.steps_removed:
        parts.append(f"steps removed: {_steps_text(change.steps_removed)}")
    if change.step_keys:
        parts.append(f"step key {change.step_keys[0]!r} -> {change.step_keys[1]!r}")
    if change.reordered:
        parts.append(f"points in another order from step {format_value(change.reordered_at)} "
                     "(verify compares them in order)")
    return f"changed: {change.name}: " + "; ".join(parts)


def _field_value(value: Any) -> str:
    text = "absent" if value is None else format_value(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def field_line(change: FieldChange) -> str:
    """One line per field beyond the points that differs: each differing place, old -> new."""
    shown = "; ".join(("" if path == change.name else f"{path}: ") + f"{_field_value(a)} -> {_field_value(b)}"
                      for path, a, b in change.paths)
    more = f"; … (+{change.more}; --json lists them)" if change.more else ""
    return f"changed: {change.name}: {shown}{more}"


def review_lines(diff: StandardDiff) -> list[str]:
    """The changed, added and removed series and the differing fields, one line each, then a count line."""
    lines = [change_line(c) for c in diff.series if c.status != "identical"]
    lines += [field_line(f) for f in diff.fields]
    counts = ", ".join(f"{diff.count(s)} {s}" for s in ("changed", "added", "removed", "identical"))
    fields = f"; fields: {', '.join(f.name for f in diff.fields)} differ" if diff.fields else ""
    lines.append(f"series: {counts}{fields}")
    return lines


def review_json(diff: StandardDiff) -> str:
    return dump_json(diff.to_json())


def print_review(diff: StandardDiff, console: Console) -> None:
    console.print(f"[bold]detaudit standard diff[/bold]: {escape(diff.old)} ({diff.old_format}) -> "
                  f"{escape(diff.new)} ({diff.new_format})")
    changed = [c for c in diff.series if c.status != "identical"]
    if changed:
        table = Table(header_style="bold")
        for col, justify in (("series", "left"), ("status", "left"), ("points", "right"), ("first diff step", "right"),
                             ("old -> new", "left"), ("kind", "left"), ("differing", "right"), ("max abs", "right"),
                             ("max rel", "right"), ("max ULPs", "right"), ("steps +/-", "right")):
            table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for c in changed:
            first = format_value(c.first_step) if c.differing else ""
            values = f"{format_value(c.first_old)} -> {format_value(c.first_new)}" if c.differing else ""
            table.add_row(escape(c.name), c.status, f"{c.points_old} -> {c.points_new}", escape(first), escape(values),
                          c.kind or "", str(c.differing) if c.status == "changed" else "", num_text(c.max_abs),
                          num_text(c.max_rel), num_text(c.max_ulps, "d"),
                          f"+{len(c.steps_added)} / -{len(c.steps_removed)}" if c.status == "changed" else "")
        console.print(table)
        for c in changed:
            if c.steps_added or c.steps_removed or c.step_keys or c.reordered:
                console.print("  " + escape(change_line(c)))
    for f in diff.fields:
        console.print(escape(field_line(f)))
    style = "green" if diff.identical else "yellow"
    console.print(f"[{style}]{escape(review_lines(diff)[-1])}[/{style}]")

