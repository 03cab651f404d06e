"""``detaudit standard show``: what a standard holds."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.data.values import encode_value, format_value
from detaudit.render.diff import names_text
from detaudit.standards.standard import Standard

def standard_summary(standard: Standard) -> dict[str, Any]:
    """What ``detaudit standard show`` prints, as data (also its ``--json``)."""
    rows = []
    for name, data in sorted(standard.series.items()):
        types = sorted({type(v).__name__ for v in data.values})
        nan = sum(1 for v in data.values if type(v) is float and v != v)
        rows.append({
            "series": name,
            "step_key": data.step_key,
            "points": len(data),
            "first_step": encode_value(data.steps[0]) if len(data) else None,
            "last_step": encode_value(data.steps[-1]) if len(data) else None,
            "types": types,
            "nan": nan,
        })
    return {
        "path": str(standard.path) if standard.path else None,
        "format": standard.format,
        "name": standard.name,
        "runner_class": standard.runner_class.to_json() if standard.runner_class else None,
        "recorded": standard.recorded,
        "meta": standard.meta,
        "excluded": sorted((standard.excluded.get("series") or {}).keys()) if isinstance(standard.excluded, dict) else [],
        "dropped": sorted(standard.dropped),
        "series": rows,
    }


def print_standard_summary(standard: Standard, console: Console) -> None:
    info = standard_summary(standard)
    console.print(f"[bold]{escape(str(info['path']))}[/bold]: {info['format']} standard"
                  + (f" {escape(info['name'])!s}" if info["name"] else "")
                  + f", {len(info['series'])} series, {sum(r['points'] for r in info['series'])} points")
    if info["runner_class"]:
        console.print(f"runner class: {escape('-'.join(info['runner_class']))}")
    rec = info["recorded"]
    if rec:
        console.print("recorded: " + escape(", ".join(
            f"{k} {rec[k]}" for k in ("runs", "agreeing", "commit", "dirty", "date", "detaudit") if k in rec)))
    if info["excluded"]:
        console.print(f"excluded ({len(info['excluded'])}): " + escape(names_text(info["excluded"])))
    if info["dropped"]:
        console.print(f"dropped ({len(info['dropped'])}): " + escape(names_text(info["dropped"])))
    dropped_nan = standard.meta.get("dropped_nan_series") if isinstance(standard.meta, dict) else None
    if dropped_nan:
        console.print(f"dropped for holding NaN ({len(dropped_nan)}): " + escape(names_text(list(dropped_nan))))
    table = Table(header_style="bold")
    for col, justify in (("series", "left"), ("step key", "left"), ("points", "right"), ("steps", "right"),
                         ("types", "left"), ("NaN", "right")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in info["series"]:
        first = format_value(standard.series[r["series"]].steps[0]) if r["points"] else ""
        last = format_value(standard.series[r["series"]].steps[-1]) if r["points"] else ""
        table.add_row(escape(r["series"]), escape(r["step_key"] or "-"), str(r["points"]), escape(f"{first} .. {last}"),
                      ", ".join(r["types"]), str(r["nan"]))
    console.print(table)

