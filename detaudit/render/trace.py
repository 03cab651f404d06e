"""English and JSON for traces: the first differing draw, module and op (overall and per
process), draws inside library code apart, what makes a trace incomplete, unseeded draws, seed
collisions, the per-process summary of ``detaudit trace``. Pure functions of the data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detaudit.flows.results import TraceFailure, TraceResult
from detaudit.render.arrival import arrival_difference_line, arrival_json
from detaudit.render.parity import parity_json, parity_lines
from detaudit.render.seed_repeats import check_json, check_lines

# The trace model is read, never built, here: its names are for annotations only, so that `record` and
# `verify` can import this module at start-up without the trace comparison (~10 ms) when nothing is traced.
if TYPE_CHECKING:
    from detaudit.trace.compare import (
        Collision,
        DrawDifference,
        LibraryDifferences,
        ModuleDifference,
        OpDifference,
        PackageChange,
        ProcessComparison,
        RunsTraceReport,
        TraceComparison,
        UnseededUse,
    )
    from detaudit.trace.files import RunTrace
    from detaudit.trace.parity import ParityReport
    from detaudit.trace.seed_repeats import SeedCheck

GENERATOR_WORDS = {"torch.cpu": "a global torch generator", "numpy": "numpy's global RandomState",
                   "random": "Python's global random"}


def generator_words(gen: str) -> str:
    if gen.startswith("torch.cuda"):
        index = gen.partition(":")[2]
        return f"the global CUDA generator of device {index}" if index else "a global CUDA generator"
    return GENERATOR_WORDS.get(gen, f"the global {gen} generator")


def _seeded_words(seeded: str | None, entropy: str | None = None) -> str:
    if entropy:
        return f"this process seeded from the OS ({entropy})"
    return "this process never seeded" if seeded is None else f"this process seeded at {seeded}"


def draw_difference_line(d: DrawDifference, labels: tuple[str, str], *, named: bool = True) -> str:
    """What differs about a draw; ``named``: led by the process's name."""
    runs = f"({labels[0]} vs {labels[1]})"
    draw = d.draw
    where = f"{draw.op} at {draw.site}" + (" (inside a library)" if draw.library else "")
    lead = f"{d.process}: " if named else ""
    if d.kind == "chain":
        c = d.chain or {}
        return (f"{lead}{c.get('op')} at {c.get('site')}: the draws after the first kept ones differ "
                f"({c.get('count_a')} vs {c.get('count_b')} of them, or their states) {runs}")
    seeded = d.seeded_a if d.seeded_a == d.seeded_b else None
    entropy = (d.a.entropy if d.a is not None else None) or (d.b.entropy if d.b is not None else None)
    from_words = f"drew from {generator_words(draw.gen)} {_seeded_words(seeded, entropy if seeded is None else None)}"
    if d.seeded_a != d.seeded_b:
        from_words += f" (seeded at {d.seeded_a or 'nowhere'} in {labels[0]}, {d.seeded_b or 'nowhere'} in {labels[1]})"
    if d.kind == "state":
        which = "its first draw" if d.first_of_generator else f"draw {d.draw_index} from that generator on"
        return f"{lead}{where} {from_words}; state differs from {which} {runs}"
    if d.kind == "site":
        assert d.a is not None and d.b is not None
        return (f"{lead}the draws part ways: {d.a.op} at {d.a.site} in {labels[0]}, "
                f"{d.b.op} at {d.b.site} in {labels[1]} (draw {d.draw_index} from {generator_words(d.a.gen)})")
    missing = labels[1] if d.a is not None else labels[0]
    return f"{lead}{where} {from_words}; {missing} made no such draw (draw {d.draw_index}) {runs}"


def _call_words(kind: str, n: int, inputs_match: bool, a_only: bool, labels: tuple[str, str],
                calls: str) -> str:
    """What differs about one module call or op (after its name); ``calls``: what its calls are."""
    if kind == "after_kept":
        return (f"its first {n} calls match, a later call differs ({labels[0]} vs {labels[1]}) (after the first "
                f"{n} {calls} only a hash chain is kept: set DETAUDIT_TRACE_KEEP higher to name the call)")
    if kind == "missing":
        return f"call {n} was made in {labels[0] if a_only else labels[1]} only"
    if inputs_match:
        return f"call {n}: same inputs, different outputs ({labels[0]} vs {labels[1]})"
    return f"call {n}: first differing output, but its inputs differ too ({labels[0]} vs {labels[1]})"


def module_difference_line(m: ModuleDifference, labels: tuple[str, str], op_found: bool = False, *,
                           named: bool = True) -> str:
    """``op_found``: whether a torch op between modules differs in the same process."""
    c = m.call
    head = (f"{m.process}: " if named else "") + f"module {c.name} ({c.cls})"
    words = _call_words(m.kind, c.n, m.inputs_match, m.b is None, labels, "calls")
    if m.kind in ("after_kept", "missing"):
        return f"{head}: {words}"
    if m.inputs_match:
        return f"{head}, {words}: this module computed different bits"
    if op_found:
        return f"{head}, {words}: the difference arose outside any module (see the first differing op)"
    return f"{head}, {words}: the difference arose outside any module (a functional op between modules)"


def op_difference_line(o: OpDifference, labels: tuple[str, str], *, named: bool = True) -> str:
    c = o.call
    called = f" (called from {c.site})" if c.site not in (c.at, "?") else ""
    head = (f"{o.process}: " if named else "") + f"op {c.name} at {c.at}{called}"
    words = _call_words(o.kind, c.n, o.inputs_match, o.b is None, labels, "calls of this op at this line")
    if o.kind in ("after_kept", "missing"):
        return f"{head}: {words}"
    if o.inputs_match:
        return f"{head}, {words}: this op computed different bits"
    return f"{head}, {words}"


def package_words(c: PackageChange, labels: tuple[str, str]) -> str:
    return f"{c.name} {c.a or 'absent'} ({labels[0]}) vs {c.b or 'absent'} ({labels[1]})"


MAX_PACKAGES_NAMED = 8


def environment_line(changes: list[PackageChange], labels: tuple[str, str]) -> str:
    """The package versions that differ: those the traces ran code of, by name; the rest counted."""
    used = [c for c in changes if c.used]
    named = (used or changes)[:MAX_PACKAGES_NAMED]
    rest = len(changes) - len(named)
    text = f"environment: {len(changes)} package version(s) differ: " + "; ".join(package_words(c, labels)
                                                                                for c in named)
    if rest:
        text += f"; {rest} more installed" + (" (no call site in them)" if used else "") + " (--json lists them)"
    return text


def library_line(group: LibraryDifferences, labels: tuple[str, str]) -> str:
    """The ops that differ inside a library whose version differs: the first, and how many."""
    first = group.ops[0]
    more = f" (+{len(group.ops) - 1} more ops in it)" if len(group.ops) > 1 else ""
    return (f"inside {package_words(group.package, labels)}, not the pipeline's own computation: "
            + op_difference_line(first, labels) + more)


def process_line(p: ProcessComparison, labels: tuple[str, str]) -> str:
    """One matched pair of processes: what differs first, or 'all agree'."""
    parts = []
    if p.draw is not None:
        parts.append("first differing draw: " + draw_difference_line(p.draw, labels, named=False))
    if p.module is not None:
        parts.append("first differing module: " + module_difference_line(p.module, labels, p.op is not None,
                                                                         named=False))
    if p.op is not None:
        parts.append("first differing op: " + op_difference_line(p.op, labels, named=False))
    if p.arrival is not None:
        parts.append("first differing arrival order: " + arrival_difference_line(p.arrival, labels, named=False))
    if not parts:
        parts.append("all agree")
    if p.library_draw is not None:
        parts.append("draws inside library code differ: " + draw_difference_line(p.library_draw, labels, named=False))
    if p.library_ops:
        parts.append(f"{len(p.library_ops)} op(s) differ inside libraries whose version differs (not the pipeline's)")
    return f"{p.process} (pid {p.pids[0]} vs {p.pids[1]}): " + "; ".join(parts)


def comparison_lines(cmp: TraceComparison) -> list[str]:
    """The lines printed next to the metric root divergence: the environment first (package
    versions that differ, the ops inside those libraries), then the pipeline's own computation."""
    lines = []
    if cmp.packages:
        lines.append(environment_line(cmp.packages, cmp.labels))
    lines += [library_line(group, cmp.labels) for group in cmp.libraries]
    if cmp.libraries and (cmp.draw is not None or cmp.module is not None or cmp.op is not None):
        lines.append("the first difference in the pipeline's own computation:")
    if cmp.draw is not None:
        more = f" (+{cmp.draw_differences - 1} more processes differ)" if cmp.draw_differences > 1 else ""
        lines.append("first differing draw: " + draw_difference_line(cmp.draw, cmp.labels) + more)
    if cmp.module is not None:
        op_found = cmp.op is not None and cmp.op.process == cmp.module.process
        lines.append("first differing module: " + module_difference_line(cmp.module, cmp.labels, op_found))
    if cmp.op is not None:
        lines.append("first differing op: " + op_difference_line(cmp.op, cmp.labels))
    if cmp.arrival is not None:
        more = f" (+{cmp.arrival_differences - 1} more processes differ)" if cmp.arrival_differences > 1 else ""
        lines.append("first differing arrival order: " + arrival_difference_line(cmp.arrival, cmp.labels) + more)
    if cmp.library_draw is not None:
        lines.append("draws inside library code differ (not the recipe's own; shown apart): "
                     + draw_difference_line(cmp.library_draw, cmp.labels))
    for text in cmp.unmatched:
        lines.append(f"process {text}")
    for text in cmp.incomplete:
        lines.append(f"trace incomplete: {text}")
    if cmp.identical:
        lines.insert(0, f"traces identical ({cmp.labels[0]} vs {cmp.labels[1]}): every process wrote a complete ledger "
                        "and every recorded draw, module call, op and arrival order of the recipe matches"
                     + (" (ops inside libraries whose version differs aside)" if cmp.libraries else ""))
    elif len(cmp.processes) > 1:
        lines.append(f"per process ({cmp.labels[0]} vs {cmp.labels[1]}):")
        lines += ["  " + process_line(p, cmp.labels) for p in cmp.processes]
    return lines


def _process_json(p: ProcessComparison, labels: tuple[str, str]) -> dict[str, Any]:
    return {"process": p.process, "pids": list(p.pids), "agree": p.agree,
            "first_draw": _draw_json(p.draw, labels) if p.draw is not None else None,
            "first_module": _module_json(p.module, labels, p.op is not None) if p.module is not None else None,
            "first_op": _op_json(p.op, labels) if p.op is not None else None,
            "library_draw": _draw_json(p.library_draw, labels) if p.library_draw is not None else None,
            "first_arrival": arrival_json(p.arrival, labels) if p.arrival is not None else None,
            "summary": process_line(p, labels)}


def _draw_json(d: DrawDifference, labels: tuple[str, str]) -> dict[str, Any]:
    return {"process": d.process, "kind": d.kind, "a": d.a.to_json() if d.a else None,
            "b": d.b.to_json() if d.b else None, "seeded_a": d.seeded_a, "seeded_b": d.seeded_b,
            "first_of_generator": d.first_of_generator, "draw_index": d.draw_index,
            "chain": d.chain, "summary": draw_difference_line(d, labels)}


def _module_json(m: ModuleDifference, labels: tuple[str, str], op_found: bool) -> dict[str, Any]:
    return {"process": m.process, "kind": m.kind, "a": m.a.to_json() if m.a else None,
            "b": m.b.to_json() if m.b else None, "inputs_match": m.inputs_match, "after_kept": m.after_kept,
            "summary": module_difference_line(m, labels, op_found)}


def _op_json(o: OpDifference, labels: tuple[str, str]) -> dict[str, Any]:
    return {"process": o.process, "kind": o.kind, "a": o.a.to_json() if o.a else None,
            "b": o.b.to_json() if o.b else None, "inputs_match": o.inputs_match,
            "summary": op_difference_line(o, labels)}


def comparison_json(cmp: TraceComparison) -> dict[str, Any]:
    op_found = cmp.op is not None and cmp.module is not None and cmp.op.process == cmp.module.process
    return {"runs": list(cmp.labels), "identical": cmp.identical,
            "first_draw": _draw_json(cmp.draw, cmp.labels) if cmp.draw is not None else None,
            "first_module": _module_json(cmp.module, cmp.labels, op_found) if cmp.module is not None else None,
            "first_op": _op_json(cmp.op, cmp.labels) if cmp.op is not None else None,
            "library_draw": _draw_json(cmp.library_draw, cmp.labels) if cmp.library_draw is not None else None,
            "first_arrival": arrival_json(cmp.arrival, cmp.labels) if cmp.arrival is not None else None,
            "package_changes": [{"package": c.name, "a": c.a, "b": c.b, "used": c.used} for c in cmp.packages],
            "library_differences": [{"package": g.package.name, "a": g.package.a, "b": g.package.b,
                                     "ops": [_op_json(o, cmp.labels) for o in g.ops],
                                     "summary": library_line(g, cmp.labels)} for g in cmp.libraries],
            "processes_with_draw_differences": cmp.draw_differences,
            "processes_with_arrival_differences": cmp.arrival_differences,
            "processes_with_module_differences": cmp.module_differences,
            "processes_with_op_differences": cmp.op_differences,
            "processes": [_process_json(p, cmp.labels) for p in cmp.processes],
            "unmatched_processes": cmp.unmatched, "incomplete": cmp.incomplete}


def unseeded_line(u: UnseededUse) -> str:
    seeded = f"it seeded only from the OS ({u.how})" if u.how else "it never seeded"
    lib = " (library code only)" if u.library_only else ""
    return (f"{u.process}: {u.count} draw(s) from {generator_words(u.generator)} {seeded}{lib}; "
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


def summary_rows(run: RunTrace) -> list[tuple[str, str, str, str, str, str]]:
    """Per process that recorded anything: name, pid, draws per generator, seeded where,
    module calls, torch ops between modules."""
    rows = []
    for p in run.processes:
        if p.silent:
            continue
        counts: dict[str, int] = {}
        for d in p.draws:
            counts[d.gen] = counts.get(d.gen, 0) + 1
        for (gen, _, _), chain in p.chains.items():
            counts[gen] = counts.get(gen, 0) + chain.count
        seeded: dict[str, str] = {}
        for s in p.seeds:
            if (s["gen"] in counts or not s["gen"].startswith("torch.cuda")) and s["gen"] not in seeded:
                where = "from the OS" if s.get("entropy") else f"at {s['site']}"
                seeded[s["gen"]] = f"{s['gen']} {where}"  # the first: a process seeds once, up front
        draws = ", ".join(f"{g} {n}" for g, n in sorted(counts.items())) or "-"
        modules = len(p.modules) + sum(c.count for c in p.module_chains.values())
        ops = len(p.ops) + sum(c.count for c in p.op_chains.values())
        rows.append((p.display, str(p.pid), draws, "; ".join(sorted(set(seeded.values()))) or "never", str(modules),
                     str(ops)))
    return rows


def _silent_count(run: RunTrace) -> int:
    return sum(1 for p in run.processes if p.silent)


def trace_json(run: RunTrace, uses: list[UnseededUse], collisions: list[Collision],
               comparison: TraceComparison | None = None, seeds: SeedCheck | None = None,
               parity: ParityReport | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "trace": str(run.path),
        "mode": run.mode,
        "card": run.card,
        "processes": [{"process": r[0], "pid": int(r[1]), "draws": r[2], "seeded": r[3], "module_calls": int(r[4]),
                       "op_calls": int(r[5])} for r in summary_rows(run)],
        "silent_processes": _silent_count(run),
        "unseeded": [{"process": u.process, "generator": u.generator, "count": u.count, "first": u.first.to_json(),
                      "library_only": u.library_only, "seeded_from_os": u.how, "summary": unseeded_line(u)}
                     for u in uses],
        "collisions": [{"process": c.label, "generator": c.generator, "pids": c.pids, "draws": c.draws,
                        "first": c.first.to_json(), "summary": collision_line(c)} for c in collisions],
        "incomplete": run.problems,
        "ended_by_parent": run.ended_by_parent,
    }
    if comparison is not None:
        doc["comparison"] = comparison_json(comparison)
    doc["seeds"] = check_json(seeds) if seeds is not None else None
    doc["parity"] = parity_json(parity) if parity is not None else None
    return doc


def print_summary(console: Any, run: RunTrace, uses: list[UnseededUse], collisions: list[Collision],
                  seeds: SeedCheck | None = None, parity: ParityReport | None = None) -> None:
    """The per-process table of ``detaudit trace``, then unseeded draws, collisions, seeds
    repeated within a step and (``--parity``) the two processes compared."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(header_style="bold", title=f"trace {run.path}", title_justify="left")
    for column in ("process", "pid", "global-RNG draws", "seeded", "module calls", "ops between modules"):
        table.add_column(column, overflow="fold")
    for row in summary_rows(run):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    silent = _silent_count(run)
    if silent:
        console.print(f"({silent} more traced process(es) recorded nothing)")
    ended = run.ended_by_parent
    if ended:
        console.print(f"({len(ended)} traced process(es) were ended by their parent before closing their ledgers, "
                      "which hold every record they made; --json lists them)")
    lines = unseeded_lines(uses)
    if lines:
        console.print("[yellow]draws from generators their process never seeded:[/yellow]")
        for line in lines:
            console.print("  " + escape(line))
    else:
        console.print(no_unseeded_line(bool(uses), not run.problems))
    for c in collisions:
        console.print("[yellow]warning: " + escape(collision_line(c)) + "[/yellow]")
    for style, line in (check_lines(seeds) if seeds is not None else []) + (parity_lines(parity) if parity else []):
        console.print(f"[{style}]" + escape(line) + f"[/{style}]")
    for problem in run.problems:
        console.print("[red]trace incomplete: " + escape(problem) + "[/red]")


def _more(n: int, what: str) -> str:
    return f" (+{n} more {what})" if n > 0 else ""


def failure_reason(result: TraceResult | RunsTraceReport, failure: TraceFailure) -> str:
    """One reason ``detaudit trace`` (or ``record --trace``) is not ok, in a few words (the report
    above it has the details)."""
    if failure == TraceFailure.RUN_FAILED:
        return "the run did not finish"
    if failure == TraceFailure.INCOMPLETE:
        problems = _incomplete_texts(result)
        first = problems[0] if problems else "no trace was read"
        return f"the trace is incomplete: {first}" + _more(len(problems) - 1, "process(es)")
    if failure == TraceFailure.TRACES_DIFFER:
        labels = result.comparison.labels if result.comparison is not None else ("saved", "this run")
        return f"the traces differ ({labels[0]} vs {labels[1]})"
    if failure == TraceFailure.UNSEEDED:
        uses = [u for u in result.unseeded if not u.library_only]
        u = uses[0]
        seeded = f"seeded only from the OS ({u.how})" if u.how else "never seeded"
        return (f"{u.process} drew from {generator_words(u.generator)} it {seeded} (first {u.first.op} at "
                f"{u.first.site})" + _more(len(uses) - 1, "process/generator pair(s)"))
    if failure == TraceFailure.SEED_COLLISION:
        c = result.collisions[0]
        return (f"seed collision: {len(c.pids)} {c.label} replicas drew identical streams from "
                f"{generator_words(c.generator)}" + _more(len(result.collisions) - 1, "collision(s)"))
    if failure == TraceFailure.SEEDS_REPEATED:
        assert result.seeds is not None
        r = result.seeds.repeats[0]
        return (f"seeds repeated within a step: {r.process}: {r.api} at {r.site}"
                + _more(len(result.seeds.repeats) - 1, "call site(s)"))
    assert isinstance(result, TraceResult) and result.parity is not None
    lines = parity_lines(result.parity)
    return lines[0][1] if lines else f"parity {' vs '.join(result.parity.sides)}: not ok"


def _incomplete_texts(result: TraceResult | RunsTraceReport) -> list[str]:
    if isinstance(result, TraceResult):
        return result.trace.problems if result.trace is not None else []
    first = result.traces[min(result.traces)] if result.traces else None
    return result.missing + result.incomplete + (first.problems if first is not None and not result.incomplete else [])


def record_trace_line(failures: list[TraceFailure], report: RunsTraceReport, written_word: str) -> str:
    """``record --trace`` whose runs' metrics agree but whose trace is not ok: every reason, one line."""
    reasons = "; ".join(failure_reason(report, f) for f in failures)
    if TraceFailure.TRACES_DIFFER in failures:
        return f"runs disagree in their traces (their metrics agree): {reasons}; {written_word}"
    return f"trace not ok (the runs' metrics agree, but the trace cannot prove the next run will): {reasons}; {written_word}"


def verdict_line(result: TraceResult) -> str:
    """The last line of ``detaudit trace``: ok, or every reason it is not, in one line."""
    failures = result.failures
    if failures:
        return "trace not ok: " + "; ".join(failure_reason(result, f) for f in failures)
    extra = "; the traces are identical" if result.comparison is not None else ""
    extra += "; parity agreed" if result.parity is not None else ""
    return ("trace ok: the run finished with a complete trace; every generator the program drew from was seeded in "
            "its process; no seed collision, no seed repeated within a step" + extra)


def verdict_json(result: TraceResult) -> dict[str, Any]:
    """``ok`` and ``why_not_ok`` (each failure's ``reason`` code and ``summary``) for ``trace --json``."""
    return {"ok": result.ok, "why_not_ok": [{"reason": str(f), "summary": failure_reason(result, f)}
                                            for f in result.failures]}


def no_unseeded_line(library_only: bool, complete: bool) -> str:
    """No unseeded draw: said of the traced processes only when the trace is incomplete."""
    return ("no draw from a global generator that its process never seeded" + (" (outside library code)" if library_only
            else "") + ("" if complete else " in the processes traced (the trace is incomplete)"))


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
        out.append(("green" if report.first_complete else "yellow",
                    no_unseeded_line(bool(report.unseeded), report.first_complete)))
    out += [("yellow", "warning: " + collision_line(c)) for c in report.collisions]
    if report.seeds is not None:
        out += check_lines(report.seeds)
    out += [("red", "trace incomplete: " + text) for text in report.missing + report.incomplete]
    return out


def runs_trace_json(report: RunsTraceReport) -> dict[str, Any]:
    return {
        "comparison": comparison_json(report.comparison) if report.comparison is not None else None,
        "unseeded": [{"process": u.process, "generator": u.generator, "count": u.count, "first": u.first.to_json(),
                      "library_only": u.library_only, "seeded_from_os": u.how, "summary": unseeded_line(u)}
                     for u in report.unseeded],
        "collisions": [{"process": c.label, "generator": c.generator, "pids": c.pids, "draws": c.draws,
                        "first": c.first.to_json(), "summary": collision_line(c)} for c in report.collisions],
        "missing": report.missing,
        "incomplete": report.incomplete,
        "seeds": check_json(report.seeds) if report.seeds is not None else None,
    }


def print_runs_trace(console: Any, report: RunsTraceReport | None) -> None:
    """With ``record --trace`` / ``verify --trace``: the first differing draw or module, unseeded
    draws, collisions, what is incomplete. Nothing without a trace."""
    if report is None:
        return
    from rich.markup import escape

    for style, line in runs_trace_lines(report):
        console.print(f"[{style}]\\[detaudit] trace: {escape(line)}[/{style}]")
