"""Rendering of diff, record and verify results for people (rich) and machines (JSON).

Output is a pure function of the result: the same inputs print the same bytes (for a
given terminal width), so reports can be diffed and committed.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.compare import (
    ABSENT,
    CLOSE_REL_TOL,
    DiffReport,
    PairDivergence,
    RootDivergence,
    SeriesChanges,
    SeriesMismatch,
)
from detaudit.floats import encode_value, format_value

_v = format_value  # every value that may be absent is shown by this one function


def _num(x: float | int | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def kind_label(kind: str) -> str:
    """A divergence kind as people read it ("close" says how close)."""
    return f"close (rel <= {CLOSE_REL_TOL:g})" if kind == "close" else kind


def _ulps_text(d: PairDivergence) -> str:
    # ULPs tell "reduction order" apart from "different data" only for close floats.
    return _num(d.ulps, "d") if d.kind == "close" else ""


def root_summary(root: RootDivergence) -> str:
    """One sentence: what was identical before the root divergence, and what differs there."""
    step_text = f"{root.step_key} {_v(root.step)}"
    if root.identical_through:
        before = ", ".join(f"{key} through {_v(step)}" for key, step in sorted(root.identical_through.items()))
        return f"all series identical before it ({before}); first difference {root.series} @ {step_text} ({root.kind})"
    return f"first difference at the very first point: {root.series} @ {step_text} ({root.kind})"


# --- JSON ----------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    return None if value is ABSENT else encode_value(value)


def _finite_or_none(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _mismatch_document(m: SeriesMismatch) -> dict[str, Any]:
    first = m.first
    return {
        "series": m.series,
        "step_key": m.step_key,
        "step": _json_value(m.step),
        "kind": m.kind,
        "values": [_json_value(v) for v in m.values],
        "present": [v is not ABSENT for v in m.values],
        "abs_diff": _finite_or_none(first.abs_diff),
        "rel_diff": _finite_or_none(first.rel_diff),
        "ulps": first.ulps,
        "disagreeing_runs": [r + 1 for r in m.disagreeing_runs],
        "by_run": [
            {
                "run": p.run + 1,
                "index": p.index,
                "kind": p.kind,
                "step": _json_value(p.step),
                "values": [_json_value(p.value_a), _json_value(p.value_b)],
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
            "step": _json_value(root.step),
            "line": root.line,
            "run": root.run + 1,
            "identical_through": {k: _json_value(v) for k, v in root.identical_through.items()},
            "summary": root_summary(root),
        },
        "excluded": report.excluded,
        "exclude_patterns": report.exclude_patterns,
        "torn_last_line": report.torn,
    }


def dump_json(doc: Any) -> str:
    """Strict, stable JSON text (sorted keys; no NaN/Infinity literals)."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)


def diff_json(report: DiffReport) -> str:
    return dump_json(diff_document(report))


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
    if report.mismatched:
        console.print(mismatch_table(report.mismatched, len(runs)))
    if report.root is not None:
        line = f" (line {report.root.line} of run {report.root.run + 1})" if report.root.line else ""
        console.print(f"[bold]root divergence[/bold]{escape(line)}: {escape(root_summary(report.root))}")


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
        row = [escape(m.series), kind_label(first.kind), escape(f"{m.step_key} {_v(first.step)}")]
        row += [escape(_v(v)) for v in m.values]
        row += [_num(first.abs_diff), _num(first.rel_diff), _ulps_text(first)]
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
    diff = ""
    if d.kind == "close":
        diff = f", abs diff {_num(d.abs_diff)}, {_num(d.ulps, 'd')} ULPs"
    elif d.kind == "value" and d.abs_diff is not None:
        diff = f", abs diff {_num(d.abs_diff)}"
    return f"{name}: {where}: {left} {_v(d.value_a)}, {right} {_v(d.value_b)} ({kind_label(d.kind)}{diff})"


def change_lines(changes: SeriesChanges) -> list[str]:
    """What ``record --update`` changed: added, removed and changed series (old -> new)."""
    lines = [f"added: {name}" for name in changes.added]
    lines += [f"removed: {name}" for name in changes.removed]
    for m in changes.changed:
        first = m.first
        lines.append(
            f"changed: {m.series} from step {_v(first.step)} ({kind_label(first.kind)}): "
            f"{_v(first.value_a)} -> {_v(first.value_b)}"
        )
    if not lines:
        lines.append(f"series unchanged ({len(changes.identical)} identical)")
    return lines


def interrupted_message(signal_name: str, states: list[Any], repeated: bool, written: str) -> str:
    """What an interrupted record or verify did to its runs, as it happened.

    ``written`` says what became of the output ("no standard written").
    """
    started = [s for s in states if s.proc is not None]
    how = f"interrupted ({signal_name}{', again: SIGKILL at once' if repeated else ''})"
    if not started:
        return f"{how} before any run started; {written}"
    survived = [s.spec.index + 1 for s in started if s.group_survived]
    killed = [s.spec.index + 1 for s in started if not s.group_survived]
    parts = []
    if killed:
        parts.append(f"killed the process group{'s' if len(killed) > 1 else ''} of run{'s' if len(killed) > 1 else ''} "
                     + ", ".join(map(str, killed)))
    if survived:
        pids = ", ".join(str(s.proc.pid) for s in started if s.group_survived)
        parts.append(f"could NOT kill the process groups of runs {', '.join(map(str, survived))} (pgid {pids}); "
                     "they may still be running")
    return f"{how}: {'; '.join(parts)}; {written}"


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


def job_lines(states: list[Any]) -> list[str]:
    """Where each cluster run ran: its Ray job id, node and runner class (local runs: none)."""
    lines = []
    for s in states:
        if getattr(s, "job_id", None) and s.status not in ("waiting", "killed"):
            cls = "-".join(s.runner_class) if s.runner_class else "unknown"
            lines.append(f"run {s.spec.index + 1}: Ray job {s.job_id} on {s.node or 'an unknown node'}, runner class {cls}")
    return lines


def stopped_jobs_message(states: list[Any]) -> str | None:
    """The cluster jobs a failed batch stopped ('' when it stopped none); None for local runs."""
    if not any(getattr(s, "job_id", None) for s in states):
        return None
    stopped = [s.job_id for s in states if s.status == "killed" and getattr(s, "job_id", None)]
    return f"stopped Ray jobs {', '.join(stopped)}" if stopped else ""


def cluster_interrupted_message(signal_name: str, stopped: list[str], written: str) -> str:
    """What an interrupted cluster record or verify did: the jobs it stopped, by id."""
    jobs = f"stopped Ray jobs {', '.join(stopped)}" if stopped else "no job of this record was running"
    return f"interrupted ({signal_name}): {jobs}; {written}"


def runner_mismatch_message(expected: list[str], states: list[Any], written: str) -> str:
    """Cluster runs that landed on another runner class than the one their standard is for."""
    other = sorted({"-".join(s.runner_class) for s in states if getattr(s, "runner_class", None)
                    and list(s.runner_class) != list(expected)})
    return (f"runs ran on different runner classes ({'-'.join(expected)} and {', '.join(other)}); bitwise "
            f"agreement is only promised within one class: {written}")
