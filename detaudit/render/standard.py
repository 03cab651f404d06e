"""``detaudit standard show``: what a standard holds."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.data.values import encode_value, format_value
from detaudit.errors import InputError
from detaudit.render.diff import names_text
from detaudit.standards.formats.registry import comparison_of, format_of
from detaudit.standards.model import Standard


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
            "not_logged": len(standard.native_series(name).get("missing", [])),
        })
    rule = comparison_of(standard)
    owner = standard.native.get("format")
    return {
        "path": str(standard.path) if standard.path else None,
        "format": standard.format,
        "name": standard.name,
        "runner_class": standard.runner_class.to_json() if standard.runner_class else None,
        "comparison": {"format": rule.name, "rule": rule.rule},
        "native": format_of(owner).describe_native(standard.native) if owner else [],
        "rename": dict(standard.rename),
        "recorded": standard.recorded,
        "meta": standard.meta,
        "excluded": sorted((standard.excluded.get("series") or {}).keys()),
        "dropped": sorted(standard.dropped),
        "series": rows,
    }


def _nonfinite_path(value: Any, path: str) -> str | None:
    if type(value) is float and value != value or type(value) is float and value in (float("inf"), float("-inf")):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _nonfinite_path(item, f"{path}.{key}" if isinstance(value, dict) else f"{path}[{key}]")
        if found:
            return found
    return None


def standard_json(standard: Standard) -> dict[str, Any]:
    """``standard show --json``: the summary, whose free-form fields must be strict JSON."""
    summary = standard_summary(standard)
    for key in ("meta", "recorded"):
        where = _nonfinite_path(summary[key], key)
        if where:
            raise InputError(standard.path, f"{where} is NaN or infinite: strict JSON (--json) cannot carry it "
                                            "(`standard show` without --json prints it)")
    return summary


def print_standard_summary(standard: Standard, console: Console) -> None:
    info = standard_summary(standard)
    console.print(f"[bold]{escape(str(info['path']))}[/bold]: {info['format']} standard"
                  + (f" {escape(info['name'])!s}" if info["name"] else "")
                  + f", {len(info['series'])} series, {sum(r['points'] for r in info['series'])} points")
    if info["runner_class"]:
        console.print(f"runner class: {escape('-'.join(info['runner_class']))}")
    console.print(f"compared by: {escape(info['comparison']['format'])}'s rule: {escape(info['comparison']['rule'])}")
    if info["native"]:
        console.print(f"from {escape(format_of(standard.native['format']).title)}: " + escape("; ".join(info["native"])))
    if info["rename"]:
        console.print("rename (run -> standard): " + escape(", ".join(f"{a} -> {b}" for a, b in info["rename"].items())))
    if info["meta"]:
        console.print("meta: " + escape(", ".join(f"{k} {format_value(v)}" for k, v in info["meta"].items())))
    rec = info["recorded"]
    if rec:
        console.print("recorded: " + escape(", ".join(
            f"{k} {rec[k]}" for k in ("runs", "agreeing", "commit", "dirty", "date", "detaudit", "schedule") if k in rec)))
    if info["excluded"]:
        console.print(f"excluded ({len(info['excluded'])}): " + escape(names_text(info["excluded"])))
    if info["dropped"]:
        console.print(f"dropped ({len(info['dropped'])}): " + escape(names_text(info["dropped"])))
    dropped_nan = standard.meta.get("dropped_nan_series")
    if dropped_nan:
        console.print(f"dropped for holding NaN ({len(dropped_nan)}): " + escape(names_text(list(dropped_nan))))
    table = Table(header_style="bold")
    not_logged = any(r["not_logged"] for r in info["series"])
    columns = [("series", "left"), ("step key", "left"), ("points", "right"), ("steps", "right"), ("types", "left"),
               ("NaN", "right")] + ([("\"nan\" (not logged)", "right")] if not_logged else [])
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in info["series"]:
        first = format_value(standard.series[r["series"]].steps[0]) if r["points"] else ""
        last = format_value(standard.series[r["series"]].steps[-1]) if r["points"] else ""
        row = [escape(r["series"]), escape(r["step_key"] or "-"), str(r["points"]), escape(f"{first} .. {last}"),
               ", ".join(r["types"]), str(r["nan"])]
        table.add_row(*row, *([str(r["not_logged"])] if not_logged else []))
    console.print(table)

