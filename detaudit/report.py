"""Rendering of diff, record and verify results for people (rich) and machines (JSON).

Output is a pure function of the result: the same inputs print the same bytes (for a
given terminal width), so reports can be diffed and committed.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.data.compare import (
    ABSENT,
    CLOSE_REL_TOL,
    DiffReport,
    PairDivergence,
    RootDivergence,
    SeriesMismatch,
)
from detaudit.data.values import encode_value, format_value

if TYPE_CHECKING:
    from detaudit.standards.diff import SeriesChange, StandardDiff
    from detaudit.standards.standard import Standard
    from detaudit.flows.suite import CardOutcome, SuitePlan, SuiteResult

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


def interrupted_message(signal_name: str, states: list[Any], repeated: bool, written: str) -> str:
    """What an interrupted record or verify did to its runs, as it happened.

    ``written`` says what became of the output ("no standard written").
    """
    started = [s for s in states if s.proc is not None]
    how = f"interrupted ({signal_name}{', again: SIGKILL at once' if repeated else ''})"
    if not started:
        return f"{how}: no run was running; {written}"
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


# --- standard review (``detaudit standard diff``, ``record --update``) and ``standard show`` ---


def _steps_text(steps: list[Any], limit: int = 6) -> str:
    shown = ", ".join(format_value(s) for s in steps[:limit])
    return shown + (f", … (+{len(steps) - limit})" if len(steps) > limit else "")


def change_line(change: "SeriesChange") -> str:
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
        figures = [f"max abs diff {_num(change.max_abs)}", f"max rel diff {_num(change.max_rel)}"]
        if change.max_ulps is not None:
            figures.append(f"max {change.max_ulps} ULPs")
        parts.append(", ".join(figures))
    if change.steps_added:
        parts.append(f"steps added: {_steps_text(change.steps_added)}")
    if change.steps_removed:
        parts.append(f"steps removed: {_steps_text(change.steps_removed)}")
    return f"changed: {change.name}: " + "; ".join(parts)


def review_lines(diff: "StandardDiff") -> list[str]:
    """The changed, added and removed series, one line each, then a count line."""
    lines = [change_line(c) for c in diff.series if c.status != "identical"]
    counts = ", ".join(f"{diff.count(s)} {s}" for s in ("changed", "added", "removed", "identical"))
    lines.append(f"series: {counts}")
    return lines


def review_json(diff: "StandardDiff") -> str:
    return json.dumps(diff.to_json(), indent=2, sort_keys=True, allow_nan=False)


def print_review(diff: "StandardDiff", console: Console) -> None:
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
                          c.kind or "", str(c.differing) if c.status == "changed" else "", _num(c.max_abs),
                          _num(c.max_rel), _num(c.max_ulps, "d"),
                          f"+{len(c.steps_added)} / -{len(c.steps_removed)}" if c.status == "changed" else "")
        console.print(table)
        for c in changed:
            if c.steps_added or c.steps_removed:
                console.print("  " + escape(change_line(c)))
    style = "green" if diff.identical else "yellow"
    console.print(f"[{style}]{escape(review_lines(diff)[-1])}[/{style}]")


def standard_summary(standard: "Standard") -> dict[str, Any]:
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
        "runner_class": standard.runner_class,
        "recorded": standard.recorded,
        "meta": standard.meta,
        "excluded": sorted((standard.excluded.get("series") or {}).keys()) if isinstance(standard.excluded, dict) else [],
        "dropped": sorted(standard.dropped),
        "series": rows,
    }


def print_standard_summary(standard: "Standard", console: Console) -> None:
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
        console.print(f"excluded ({len(info['excluded'])}): " + escape(_names(info["excluded"])))
    if info["dropped"]:
        console.print(f"dropped ({len(info['dropped'])}): " + escape(_names(info["dropped"])))
    dropped_nan = standard.meta.get("dropped_nan_series") if isinstance(standard.meta, dict) else None
    if dropped_nan:
        console.print(f"dropped for holding NaN ({len(dropped_nan)}): " + escape(_names(list(dropped_nan))))
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


# --- suites: ``detaudit plan``, ``verify --suite``, est_time warnings -----------------------


def _seconds(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}s" if x >= 10 else f"{x:.1f}s"


def est_time_warning(card_name: str, est_time: float, elapsed: float) -> str:
    """The warning after a run that took longer than its card's ``est_time``."""
    return (f"{card_name}: the run took {_seconds(elapsed)}, over the card's est_time of {_seconds(est_time)}; "
            "raise est_time so suite plans stay true")


def print_plan(plan: "SuitePlan", console: Console) -> None:
    title = f"suite {plan.suite}" if plan.suite else "all cards"
    table = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (("card", "left"), ("file", "left"), ("suite", "left"), ("est_time", "right"),
                         ("GPUs", "right"), ("timeout", "right")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for card in plan.cards:
        table.add_row(escape(card.name), escape(str(card.path)), escape(card.suite or "-"), _seconds(card.est_time),
                      str(card.gpus_per_run), _seconds(card.timeout_s))
    console.print(table)
    line = f"total: {_seconds(plan.total)} for {len(plan.cards)} cards run one after another"
    if plan.gpu_seconds:
        line += f", {plan.gpu_seconds:.0f} GPU-seconds"
    console.print(line)
    if plan.unknown:
        console.print(f"[yellow]no est_time (not in the total): {escape(', '.join(plan.unknown))}[/yellow]")
    if plan.budget is not None:
        if plan.fits:
            console.print(f"[green]within the budget of {_seconds(plan.budget)} "
                          f"({_seconds(plan.budget - plan.total)} to spare)[/green]")
        elif plan.unknown:
            console.print(f"[red]OVER BUDGET: cannot show the suite fits {_seconds(plan.budget)}: "
                          f"{len(plan.unknown)} card(s) have no est_time[/red]")
        else:
            console.print(f"[red]OVER BUDGET: {_seconds(plan.total)} > {_seconds(plan.budget)} "
                          f"(by {_seconds(plan.total - plan.budget)})[/red]")


def plan_document(plan: "SuitePlan") -> dict[str, Any]:
    return {
        "suite": plan.suite,
        "cards": [{"name": c.name, "path": str(c.path), "suite": c.suite, "est_time": c.est_time,
                   "gpus_per_run": c.gpus_per_run} for c in plan.cards],
        "total_s": plan.total,
        "gpu_seconds": plan.gpu_seconds,
        "unknown_est_time": plan.unknown,
        "budget_s": plan.budget,
        "fits": plan.fits,
    }


SUITE_STATUS = {
    "passed": "PASSED", "failed": "FAILED", "run-failed": "RUN FAILED", "not-verified": "NOT VERIFIED",
    "skipped": "SKIPPED", "approximate": "PASSED (approximate)", "empty-standard": "NOT VERIFIED (empty standard)", "error": "ERROR",
}


def status_detail(status: str, result: Any, error: str | None = None, limit: int = 3) -> str:
    """One line for a verify outcome: what matched, the first divergences, or why it was not verified."""
    if status == "error":
        return error or ""
    if status == "passed":
        return f"{result.compared} series match"
    if status == "approximate":
        return approximate_line(result)
    if status == "failed":
        lines = [divergence_line(name, d) for name, d in result.failures[:limit]]
        more = len(result.failures) - limit
        return f"{len(result.failures)} of {result.compared} differ: " + "; ".join(lines) + (f"; +{more} more" if more > 0 else "")
    if status in ("not-verified", "skipped"):
        here = "-".join(result.runner_here or [])
        others = ", ".join(sorted({"-".join(c) for c in result.other_classes})) or "-".join(result.runner_standard or [])
        return f"no standard for runner class {here} (standards for {others})"
    if status == "empty-standard":
        return "the standard has no series"
    if status == "run-failed":
        run = result.run
        return f"the run ended with {run.status} (exit code {run.returncode}); log {run.spec.log_path}"
    if status == "runner-mismatch":
        return runner_mismatch_message(result.runner_here or [], [result.run], "not verified")
    return ""


def approximate_line(result: Any) -> str:
    """How an approximate verify passed: identical series, and those only within tolerance."""
    within = ", ".join(f"{name} ({tol})" for name, tol in result.approximate)
    identical = result.compared - len(result.approximate)
    return (f"runner class {'-'.join(result.runner_here or [])} against the {result.approximate_against} standard: "
            f"{identical} series identical, {len(result.approximate)} within tolerance (approximate)"
            + (f": {within}" if within else ""))


def outcome_detail(outcome: "CardOutcome", limit: int = 3) -> str:
    """A suite row's detail (``status_detail`` of the card's verify)."""
    return status_detail(outcome.status, outcome.result, outcome.error, limit)


def print_suite(result: "SuiteResult", console: Console) -> None:
    table = Table(title=f"detaudit verify --suite {result.suite}", title_justify="left", header_style="bold")
    for col, justify in (("card", "left"), ("status", "left"), ("time", "right"), ("est_time", "right"),
                         ("detail", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for o in result.outcomes:
        style = "green" if o.status == "passed" else "yellow" if o.status in ("skipped", "approximate") else "red"
        table.add_row(escape(o.card.name), f"[{style}]{SUITE_STATUS.get(o.status, o.status)}[/{style}]",
                      _seconds(o.elapsed), _seconds(o.card.est_time), escape(outcome_detail(o)))
    console.print(table)
    passed = sum(1 for o in result.outcomes if o.status == "passed")
    style = "green" if result.exit_code == 0 else "red"
    console.print(f"[{style}]\\[detaudit] suite {escape(str(result.suite))}: {passed} of {len(result.outcomes)} "
                  f"cards passed{'' if result.exit_code == 0 else ' — FAILED'}[/{style}]")


# --- doctor ------------------------------------------------------------------------------


def print_doctor(rows: list[Any], console: Console, *, only_failing: bool = False) -> None:
    """The preflight table: per process and check, the value seen, and a fix for each failing row."""
    shown = [r for r in rows if not r.ok] if only_failing else rows
    table = Table(title="detaudit doctor", title_justify="left", header_style="bold")
    for col in ("process", "check", "", "seen", "fix"):
        table.add_column(col, overflow="fold")
    for r in shown:
        table.add_row(escape(r.process), escape(r.check), "[green]ok[/green]" if r.ok else "[red]FAIL[/red]",
                      escape(r.value), escape(r.fix))
    if shown:
        console.print(table)
    failing = sum(1 for r in rows if not r.ok)
    style = "green" if not failing else "red"
    console.print(f"[{style}]\\[detaudit] doctor: {len(rows) - failing} of {len(rows)} checks pass"
                  + (f", {failing} fail" if failing else "") + f"[/{style}]")


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


# --- record / verify --json -------------------------------------------------------------------

def _runs_document(states: list[Any]) -> list[dict[str, Any]]:
    """Each run's outcome (no timings: a report of the same runs is byte-identical)."""
    return [{"run": s.spec.index + 1, "status": s.status, "returncode": s.returncode,
             "log": str(s.spec.log_path), "metrics": str(s.spec.metrics_path),
             "gpus": s.spec.gpus} for s in states if s is not None]


def _trace_document(trace: Any) -> dict[str, Any] | None:
    if trace is None:
        return None
    from detaudit.trace.report import runs_trace_json

    return runs_trace_json(trace)


def divergence_document(name: str, d: PairDivergence) -> dict[str, Any]:
    """One failing series of a verify: where it first departs from the standard."""
    return {"series": name, "kind": d.kind, "step": _json_value(d.step),
            "step_standard": _json_value(d.step_a), "step_run": _json_value(d.step_b),
            "standard": _json_value(d.value_a), "run": _json_value(d.value_b),
            "points": [d.len_a, d.len_b], "abs_diff": _finite_or_none(d.abs_diff),
            "rel_diff": _finite_or_none(d.rel_diff), "ulps": d.ulps,
            "summary": divergence_line(name, d)}


def record_document(result: Any, card: str, runs: int) -> dict[str, Any]:
    """``detaudit record --json``: the outcome, the runs' diff, and the trace report."""
    return {
        "command": "record", "card": card, "status": result.status, "ok": result.ok, "runs_requested": runs,
        "runner_class": result.runner_class or (result.standard.runner_class if result.standard else None),
        "standard": str(result.standard_path) if result.standard_path and result.status == "written" else None,
        "series_written": len(result.standard.series) if result.standard is not None and result.status == "written" else 0,
        "dropped": sorted(result.dropped), "nan_dropped": list(result.nan_dropped),
        "review": result.review.to_json() if result.review is not None else None,
        "diff": diff_document(result.report) if result.report is not None else None,
        "trace": _trace_document(result.trace),
        "standard_trace": str(result.standard_trace) if result.standard_trace else None,
        "runs": _runs_document(result.runs),
        "workdir": str(result.workdir) if result.workdir else None, "workdir_removed": result.workdir_removed,
    }


def verify_document(result: Any, card: str | None) -> dict[str, Any]:
    """``detaudit verify --json``: the outcome, each failing series, the environment's
    differences from the standard's, and the trace report."""
    return {
        "command": "verify", "card": card, "status": result.status, "ok": result.ok,
        "standard": str(result.standard_path), "compared": result.compared,
        "failures": [divergence_document(name, d) for name, d in result.failures],
        "extra_series": list(result.extra_series),
        "approximate": [{"series": s, "tolerance": t} for s, t in result.approximate],
        "runner_class": result.runner_here, "standard_runner_class": result.runner_standard,
        "other_classes": [list(c) for c in result.other_classes],
        "provenance": list(result.provenance), "package_changes": list(result.package_changes),
        "trace": _trace_document(result.trace),
        "standard_trace": str(result.standard_trace) if result.standard_trace else None,
        "runs": _runs_document([result.run]) if result.run is not None else [],
        "metrics": str(result.metrics_path) if result.metrics_path else None,
        "workdir": str(result.workdir) if result.workdir else None, "workdir_removed": result.workdir_removed,
    }
