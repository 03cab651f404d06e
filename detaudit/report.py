"""Rendering of diff, record and verify results for people (rich) and machines (JSON).

Output is a pure function of the result: the same inputs print the same bytes (for a
given terminal width), so reports can be diffed and committed.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.compare import ABSENT, DiffReport, PairDivergence, SeriesMismatch
from detaudit.floats import format_value


def _v(value: Any) -> str:
    return "absent" if value is ABSENT else format_value(value)


def _num(x: float | int | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def diff_json(report: DiffReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True, allow_nan=False)


def _names(names: list[str], limit: int = 60) -> str:
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
    console.print(f"identical: {escape(_names(report.identical))}")
    if report.mismatched:
        console.print(f"mismatched: {escape(_names([m.series for m in report.mismatched]))}")
    if report.excluded:
        console.print(f"excluded ({len(report.excluded)}): " + escape(_names(sorted(report.excluded))))
        reasons = sorted(set(report.excluded.values()))
        console.print("  by: " + escape("; ".join(reasons)))
    else:
        console.print("excluded: none")
    for path in report.torn:
        console.print(f"[yellow]warning: {escape(path)}: torn last line dropped[/yellow]")
    if report.mismatched:
        console.print(mismatch_table(report.mismatched, len(runs)))
    if report.root is not None:
        line = f" (line {report.root.line} of run {report.root.run + 1})" if report.root.line else ""
        console.print(f"[bold]root divergence[/bold]{escape(line)}: {escape(report.root.summary)}")


def mismatch_table(mismatched: list[SeriesMismatch], n_runs: int) -> Table:
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
        row = [escape(m.series), first.kind, escape(f"{m.step_key} {_v(first.step)}")]
        row += [escape(_v(v)) for v in m.values]
        row += [_num(first.abs_diff), _num(first.rel_diff), _num(first.ulps, "d")]
        if n_runs > 2:
            row.append(", ".join(f"run {r + 1}" for r in m.disagreeing_runs))
        table.add_row(*row)
    return table


def divergence_line(name: str, d: PairDivergence, left: str = "standard", right: str = "run") -> str:
    """One line per failing series: first divergent step, both values, the kind."""
    if d.kind == "missing":
        side = right if d.value_b is ABSENT else left
        return f"{name}: missing in the {side}"
    if d.kind == "steps" and (d.value_a is ABSENT or d.value_b is ABSENT):
        return f"{name}: {d.len_a} points in the {left}, {d.len_b} in the {right} (steps: first extra at step {_v(d.step)})"
    where = f"step {_v(d.step_a)}" if d.kind != "steps" else f"step {_v(d.step_a)} vs {_v(d.step_b)}"
    diff = f", abs diff {_num(d.abs_diff)}, {_num(d.ulps, 'd')} ULPs" if d.ulps is not None else ""
    return f"{name}: {where}: {left} {_v(d.value_a)}, {right} {_v(d.value_b)} ({d.kind}{diff})"


def environment_json(cls: list[str], info: dict[str, Any]) -> str:
    """``detaudit env --json``: the runner class and the whole probe, keys sorted."""
    return json.dumps({"runner_class": cls, "environment": info}, indent=2, sort_keys=True)


def print_environment(cls: list[str], info: dict[str, Any], console: Console) -> None:
    """``detaudit env``: the runner class, then the fields that change bits, one per line."""
    cpu = info.get("cpu") or {}
    threads = ", ".join(f"{k}={v}" for k, v in sorted((info.get("threads") or {}).items()))
    gpu = info.get("gpu")
    rows = [
        ("runner class", "-".join(cls)),
        ("cpu", f"{cpu.get('vendor', '?')} {cpu.get('model_name', '')} (family {cpu.get('family', '?')}, "
                f"model {cpu.get('model', '?')}, stepping {cpu.get('stepping', '?')})"),
        ("cpu flags", " ".join(cpu.get("flags") or [])),
        ("cpu capability", str(info.get("cpu_capability", "?"))),
        ("threads", threads or "?"),
        ("torch", f"{info.get('torch', 'absent')} "
                  + " ".join(f"{k}={v}" for k, v in sorted((info.get("torch_config") or {}).items()))),
        ("python", f"{info.get('python', '?')} ({(info.get('platform') or {}).get('libc', '?')})"),
        ("gpu", f"{gpu['count']} x {gpu['name']}, driver {info.get('driver')}, CUDA {info.get('cuda')}, "
                f"cuDNN {info.get('cudnn')}, NCCL {info.get('nccl')}" if gpu else "none visible"),
        ("packages", f"{len(info.get('packages') or {})} installed (see --json)"),
    ]
    for key, value in rows:
        console.print(f"{key:>15}: {escape(value)}")
