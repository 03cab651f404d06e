"""English and JSON for traces: the first differing draw or module, unseeded draws, seed
collisions, the per-process summary of ``detaudit trace``. Pure functions of the data."""

from __future__ import annotations

from typing import Any

from detaudit.trace.compare import (
    Collision,
    DrawDifference,
    ModuleDifference,
    RunsTraceReport,
    TraceComparison,
    UnseededUse,
)
from detaudit.trace.files import RunTrace

GENERATOR_WORDS = {"torch.cpu": "a global torch generator", "numpy": "numpy's global RandomState",
                   "random": "Python's global random"}


def generator_words(gen: str) -> str:
    if gen.startswith("torch.cuda"):
        index = gen.partition(":")[2]
        return f"the global CUDA generator of device {index}" if index else "a global CUDA generator"
    return GENERATOR_WORDS.get(gen, f"the global {gen} generator")


def _seeded_words(seeded: str | None) -> str:
    return "this process never seeded" if seeded is None else f"this process seeded at {seeded}"


def draw_difference_line(d: DrawDifference, labels: tuple[str, str]) -> str:
    runs = f"({labels[0]} vs {labels[1]})"
    draw = d.draw
    where = f"{draw.op} at {draw.site}" + (" (inside a library)" if draw.library else "")
    if d.kind == "chain":
        c = d.chain or {}
        return (f"{d.process}: {c.get('op')} at {c.get('site')}: the draws after the first kept ones differ "
                f"({c.get('count_a')} vs {c.get('count_b')} of them, or their states) {runs}")
    seeded = d.seeded_a if d.seeded_a == d.seeded_b else None
    from_words = f"drew from {generator_words(draw.gen)} {_seeded_words(seeded)}"
    if d.seeded_a != d.seeded_b:
        from_words += f" (seeded at {d.seeded_a or 'nowhere'} in {labels[0]}, {d.seeded_b or 'nowhere'} in {labels[1]})"
    if d.kind == "state":
        which = "its first draw" if d.first_of_generator else f"draw {d.draw_index} from that generator on"
        return f"{d.process}: {where} {from_words}; state differs from {which} {runs}"
    if d.kind == "site":
        assert d.a is not None and d.b is not None
        return (f"{d.process}: the draws part ways: {d.a.op} at {d.a.site} in {labels[0]}, "
                f"{d.b.op} at {d.b.site} in {labels[1]} (draw {d.draw_index} from {generator_words(d.a.gen)})")
    missing = labels[1] if d.a is not None else labels[0]
    return f"{d.process}: {where} {from_words}; {missing} made no such draw (draw {d.draw_index}) {runs}"


def module_difference_line(m: ModuleDifference, labels: tuple[str, str]) -> str:
    runs = f"({labels[0]} vs {labels[1]})"
    if m.after_kept:
        return (f"{m.process}: module {m.a.name} ({m.a.cls}): its first {m.a.n} calls match, a later call "
                f"differs {runs} (after the first {m.a.n} calls only a hash chain is kept: set "
                "DETAUDIT_TRACE_KEEP higher to name the call)")
    head = f"{m.process}: module {m.a.name} ({m.a.cls}), call {m.a.n}"
    if m.inputs_match:
        return f"{head}: same inputs, different outputs {runs}: this module computed different bits"
    return (f"{head}: first differing output, but its inputs differ too {runs}: the difference arose "
            "outside any module (a functional op between modules)")


def comparison_lines(cmp: TraceComparison) -> list[str]:
    """The lines printed next to the metric root divergence."""
    lines = []
    if cmp.draw is not None:
        more = f" (+{cmp.draw_differences - 1} more processes differ)" if cmp.draw_differences > 1 else ""
        lines.append("first differing draw: " + draw_difference_line(cmp.draw, cmp.labels) + more)
    if cmp.module is not None:
        lines.append("first differing module: " + module_difference_line(cmp.module, cmp.labels))
    for text in cmp.unmatched:
        lines.append(f"process {text}")
    for text in cmp.incomplete:
        lines.append(f"trace incomplete: {text}")
    if not lines:
        lines.append(f"traces identical ({cmp.labels[0]} vs {cmp.labels[1]}): every recorded draw and module call matches")
    return lines


def comparison_json(cmp: TraceComparison) -> dict[str, Any]:
    doc: dict[str, Any] = {"runs": list(cmp.labels), "identical": cmp.identical, "first_draw": None,
                           "first_module": None, "processes_with_draw_differences": cmp.draw_differences,
                           "processes_with_module_differences": cmp.module_differences,
                           "unmatched_processes": cmp.unmatched, "incomplete": cmp.incomplete}
    if cmp.draw is not None:
        d = cmp.draw
        doc["first_draw"] = {"process": d.process, "kind": d.kind, "a": d.a.to_json() if d.a else None,
                             "b": d.b.to_json() if d.b else None, "seeded_a": d.seeded_a, "seeded_b": d.seeded_b,
                             "first_of_generator": d.first_of_generator, "draw_index": d.draw_index,
                             "chain": d.chain, "summary": draw_difference_line(d, cmp.labels)}
    if cmp.module is not None:
        m = cmp.module
        doc["first_module"] = {"process": m.process, "a": m.a.to_json(), "b": m.b.to_json(),
                               "inputs_match": m.inputs_match, "after_kept": m.after_kept,
                               "summary": module_difference_line(m, cmp.labels)}
    return doc


def unseeded_line(u: UnseededUse) -> str:
    how = f" (seeded with a random seed: {u.how})" if u.how else ""
    lib = " (library code only)" if u.library_only else ""
    return (f"{u.process}: {u.count} draw(s) from {generator_words(u.generator)} it never seeded{how}{lib}; "
            f"first {u.first.op} at {u.first.site}")


def collision_line(c: Collision) -> str:
    pids = ", ".join(str(p) for p in c.pids)
    return (f"seed collision: {len(c.pids)} {c.label} replicas (pids {pids}) drew identical streams from "
            f"{generator_words(c.generator)} ({c.draws} draws, first {c.first.op} at {c.first.site}): "
            "they were seeded alike, so they sample alike")


def unseeded_lines(uses: list[UnseededUse], *, user_only: bool = True) -> list[str]:
    shown = [u for u in uses if not (user_only and u.library_only)]
    lines = [unseeded_line(u) for u in shown]
    hidden = len(uses) - len(shown)
    if hidden:
        lines.append(f"({hidden} more process/generator pair(s) drawn from unseeded only inside library code; "
                     "--json lists them)")
    return lines


def summary_rows(run: RunTrace) -> list[tuple[str, str, str, str, str]]:
    """Per process: name, pid, draws per generator, seeded where, module calls."""
    rows = []
    for p in run.processes:
        counts: dict[str, int] = {}
        for d in p.draws:
            counts[d.gen] = counts.get(d.gen, 0) + 1
        for (gen, _, _), chain in p.chains.items():
            counts[gen] = counts.get(gen, 0) + chain.count
        seeded: dict[str, str] = {}
        for s in p.seeds:
            if (s["gen"] in counts or not s["gen"].startswith("torch.cuda")) and s["gen"] not in seeded:
                seeded[s["gen"]] = f"{s['gen']} at {s['site']}"  # the first: a process seeds once, up front
        draws = ", ".join(f"{g} {n}" for g, n in sorted(counts.items())) or "-"
        modules = len(p.modules) + sum(c.count for c in p.module_chains.values())
        rows.append((p.display, str(p.pid), draws, "; ".join(sorted(set(seeded.values()))) or "never", str(modules)))
    return rows


def trace_json(run: RunTrace, uses: list[UnseededUse], collisions: list[Collision],
               comparison: TraceComparison | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "trace": str(run.path),
        "processes": [{"process": r[0], "pid": int(r[1]), "draws": r[2], "seeded": r[3], "module_calls": int(r[4])}
                      for r in summary_rows(run)],
        "unseeded": [{"process": u.process, "generator": u.generator, "count": u.count, "first": u.first.to_json(),
                      "library_only": u.library_only, "random_seed": u.how, "summary": unseeded_line(u)} for u in uses],
        "collisions": [{"process": c.label, "generator": c.generator, "pids": c.pids, "draws": c.draws,
                        "first": c.first.to_json(), "summary": collision_line(c)} for c in collisions],
        "incomplete": run.errors,
    }
    if comparison is not None:
        doc["comparison"] = comparison_json(comparison)
    return doc


def print_summary(console: Any, run: RunTrace, uses: list[UnseededUse], collisions: list[Collision]) -> None:
    """The per-process table of ``detaudit trace``, then unseeded draws and collisions."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(header_style="bold", title=f"trace {run.path}", title_justify="left")
    for column in ("process", "pid", "global-RNG draws", "seeded", "module calls"):
        table.add_column(column, overflow="fold")
    for row in summary_rows(run):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    lines = unseeded_lines(uses)
    if lines:
        console.print("[yellow]draws from generators their process never seeded:[/yellow]")
        for line in lines:
            console.print("  " + escape(line))
    else:
        console.print("no draw from a global generator that its process never seeded"
                      + (" (outside library code)" if uses else ""))
    for c in collisions:
        console.print("[yellow]warning: " + escape(collision_line(c)) + "[/yellow]")
    for error in run.errors:
        console.print("[red]trace incomplete: " + escape(error) + "[/red]")


def print_comparison(console: Any, cmp: TraceComparison) -> None:
    from rich.markup import escape

    style = "green" if cmp.identical else "red"
    for line in comparison_lines(cmp):
        console.print(f"[{style}]\\[detaudit] trace: {escape(line)}[/{style}]")


def runs_trace_lines(report: RunsTraceReport) -> list[tuple[str, str]]:
    """(style, line) pairs for ``record --trace`` / ``verify --trace``."""
    out: list[tuple[str, str]] = []
    if report.comparison is not None:
        style = "green" if report.comparison.identical else "red"
        out += [(style, line) for line in comparison_lines(report.comparison)]
    lines = unseeded_lines(report.unseeded)
    if lines:
        out += [("yellow", line if line.startswith("(") else "unseeded: " + line) for line in lines]
    else:
        out.append(("green", "no draw from a global generator that its process never seeded"
                    + (" (outside library code)" if report.unseeded else "")))
    out += [("yellow", "warning: " + collision_line(c)) for c in report.collisions]
    out += [("red", "trace incomplete: " + text) for text in report.missing]
    return out


def runs_trace_json(report: RunsTraceReport) -> dict[str, Any]:
    return {
        "comparison": comparison_json(report.comparison) if report.comparison is not None else None,
        "unseeded": [{"process": u.process, "generator": u.generator, "count": u.count, "first": u.first.to_json(),
                      "library_only": u.library_only, "random_seed": u.how, "summary": unseeded_line(u)}
                     for u in report.unseeded],
        "collisions": [{"process": c.label, "generator": c.generator, "pids": c.pids, "draws": c.draws,
                        "first": c.first.to_json(), "summary": collision_line(c)} for c in report.collisions],
        "missing": report.missing,
    }


def print_runs_trace(console: Any, report: RunsTraceReport | None) -> None:
    """With ``record --trace`` / ``verify --trace``: the first differing draw or module, unseeded
    draws, collisions, what is incomplete. Nothing without a trace."""
    if report is None:
        return
    from rich.markup import escape

    for style, line in runs_trace_lines(report):
        console.print(f"[{style}]\\[detaudit] trace: {escape(line)}[/{style}]")
