"""Compare traces: the first draw or module call that differs between two runs (or two
machines), the draws from generators a process never seeded, and seed collisions.

Returns data only; ``detaudit.render.trace`` words it.

Processes are matched across runs by (kind, label, actor name); replicas of one actor
class are paired by the longest common prefix of their records, so that replicas seeded by
rank pair with their counterparts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.trace.files import Draw, ModuleCall, ProcessTrace, RunTrace, read_trace

RANDOM_SEEDING = ("torch.seed()", "np.random.seed()", "random.seed()", "torch.cuda.seed()", "torch.cuda.seed_all()")


@dataclass
class DrawDifference:
    """The first draw in a pair of matched processes that differs."""

    process: str                  # display name, e.g. "RolloutManager (Ray actor)"
    kind: str                     # state, site (a different draw), missing (one run drew less), chain
    a: Draw | None
    b: Draw | None
    seeded_a: str | None = None   # where the process seeded this generator (None: never)
    seeded_b: str | None = None
    first_of_generator: bool = False
    draw_index: int = 0           # 1-based index among this process's draws from the generator
    chain: dict[str, Any] | None = None  # kind chain: gen, op, site, counts, after

    @property
    def draw(self) -> Draw:
        return self.a if self.a is not None else self.b  # type: ignore[return-value]

    @property
    def rank(self) -> tuple[int, float]:
        """Smaller is the likelier cause: an unseeded user draw whose state differs first."""
        d = self.draw
        if self.kind == "chain":
            return (6, 0.0)
        library = d.library
        unseeded = self.seeded_a is None or self.seeded_b is None
        if self.kind == "state":
            base = 0 if unseeded else 1
        elif self.kind == "site":
            base = 2
        else:
            base = 3
        return (base + (3 if library else 0), d.t)


@dataclass
class ModuleDifference:
    process: str
    a: ModuleCall
    b: ModuleCall
    # Only the hash chain of calls after the kept records differs: a, b are the last kept calls
    # (identical), so which later call differs, and whether its inputs matched, is unknown.
    after_kept: bool = False

    @property
    def inputs_match(self) -> bool:
        return not self.after_kept and self.a.inputs == self.b.inputs


@dataclass
class TraceComparison:
    labels: tuple[str, str]
    draw: DrawDifference | None = None
    module: ModuleDifference | None = None
    draw_differences: int = 0     # matched process pairs whose draws differ
    module_differences: int = 0
    unmatched: list[str] = field(default_factory=list)   # processes in only one of the runs
    incomplete: list[str] = field(default_factory=list)  # trace errors: the answer may be partial

    @property
    def identical(self) -> bool:
        return self.draw is None and self.module is None and not self.unmatched and not self.incomplete


@dataclass
class UnseededUse:
    process: str
    generator: str
    count: int
    first: Draw
    library_only: bool
    how: str | None = None  # "torch.seed()" when seeded, but with a random seed


@dataclass
class Collision:
    label: str
    generator: str
    pids: list[int]
    draws: int
    first: Draw


def _prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _keys(p: ProcessTrace) -> tuple[list[Any], list[Any]]:
    return [d.key for d in p.draws], [(m.name, m.n, m.inputs, m.outputs) for m in p.modules]


def match_processes(a: RunTrace, b: RunTrace) -> tuple[list[tuple[ProcessTrace, ProcessTrace]], list[str]]:
    groups_b: dict[tuple[str, str, str], list[ProcessTrace]] = {}
    for p in b.processes:
        groups_b.setdefault(p.group, []).append(p)
    pairs, unmatched = [], []
    for p in a.processes:
        candidates = groups_b.get(p.group, [])
        if not candidates:
            unmatched.append(f"{p.display} (pid {p.pid}) only in the first")
            continue
        draws, modules = _keys(p)
        best = max(candidates, key=lambda q: (_prefix(draws, _keys(q)[0]) + _prefix(modules, _keys(q)[1])))
        candidates.remove(best)
        pairs.append((p, best))
    for rest in groups_b.values():
        unmatched += [f"{q.display} (pid {q.pid}) only in the second" for q in rest]
    return pairs, unmatched


def first_draw_difference(a: ProcessTrace, b: ProcessTrace) -> DrawDifference | None:
    for i, (x, y) in enumerate(zip(a.draws, b.draws)):
        if x.key == y.key:
            continue
        kind = "state" if (x.gen, x.op, x.site) == (y.gen, y.op, y.site) else "site"
        index = sum(1 for d in a.draws[: i + 1] if d.gen == x.gen)
        return DrawDifference(a.display, kind, x, y, x.seeded, y.seeded, index == 1, index)
    if len(a.draws) != len(b.draws):
        i = min(len(a.draws), len(b.draws))
        x = a.draws[i] if i < len(a.draws) else None
        y = b.draws[i] if i < len(b.draws) else None
        d = x or y
        assert d is not None
        index = sum(1 for e in (a.draws if x else b.draws)[: i + 1] if e.gen == d.gen)
        return DrawDifference(a.display, "missing", x, y, d.seeded, d.seeded, index == 1, index)
    for key in sorted(set(a.chains) | set(b.chains)):
        ca, cb = a.chains.get(key), b.chains.get(key)
        if ca is None or cb is None or ca.differs(cb):
            gen, op, site = key
            last = next(d for d in reversed(a.draws or b.draws) if (d.gen, d.op, d.site) == key) \
                if any((d.gen, d.op, d.site) == key for d in a.draws) else None
            proto = last or Draw(0, gen, op, site, False, 0, "", None)
            return DrawDifference(a.display, "chain", proto, None, proto.seeded, proto.seeded, False, 0,
                                  chain={"generator": gen, "op": op, "site": site, "count_a": ca.count if ca else 0,
                                         "count_b": cb.count if cb else 0})
    return None


def first_module_difference(a: ProcessTrace, b: ProcessTrace) -> ModuleDifference | None:
    """The first call (innermost first) whose inputs match and outputs differ; else the first
    whose outputs differ (its inputs differ too: the change came from outside any module)."""
    first_any = None
    for x, y in zip(a.modules, b.modules):
        if (x.name, x.n) != (y.name, y.n):
            break  # a different call order: compare no further
        if x.outputs != y.outputs:
            if x.inputs == y.inputs:
                return ModuleDifference(a.display, x, y)
            if first_any is None:
                first_any = ModuleDifference(a.display, x, y)
    if first_any is not None:
        return first_any
    differing = [name for name in sorted(set(a.module_chains) | set(b.module_chains))
                 if a.module_chains.get(name) is None or b.module_chains.get(name) is None
                 or a.module_chains[name].differs(b.module_chains[name])]
    if not differing:
        return None
    # innermost first (a parent's outputs differ whenever a child's do), then the outer ones
    inner = [n for n in differing if not any(o.startswith(n + ".") for o in differing)]
    for name in inner + [n for n in differing if n not in inner]:
        last, other = _last_kept_call(a, name), _last_kept_call(b, name)
        if last is not None and other is not None:
            return ModuleDifference(a.display, last, other, after_kept=True)
    # No differing module has a kept call in both runs (it ran in one run only, or nothing was
    # kept): the chains still differ, so this is a difference, never "identical".
    name = inner[0]
    call = _last_kept_call(a, name) or _last_kept_call(b, name) or ModuleCall(0, name, "?", 0, "", "")
    return ModuleDifference(a.display, call, call, after_kept=True)


def _last_kept_call(trace: ProcessTrace, name: str) -> ModuleCall | None:
    return next((m for m in reversed(trace.modules) if m.name == name), None)


def compare_traces(a: RunTrace, b: RunTrace, labels: tuple[str, str] = ("run 1", "run 2")) -> TraceComparison:
    pairs, unmatched = match_processes(a, b)
    result = TraceComparison(labels, unmatched=unmatched, incomplete=a.errors + b.errors)
    draws = [d for d in (first_draw_difference(x, y) for x, y in pairs) if d is not None]
    modules = [m for m in (first_module_difference(x, y) for x, y in pairs) if m is not None]
    result.draw_differences, result.module_differences = len(draws), len(modules)
    if draws:
        result.draw = min(draws, key=lambda d: d.rank)
    if modules:
        result.module = min(modules, key=lambda m: (m.after_kept, not m.inputs_match, m.a.t))
    return result


def unseeded_uses(run: RunTrace) -> list[UnseededUse]:
    """Per process and generator: the draws made while the process had not seeded it (or had
    seeded it with a random seed)."""
    out = []
    for p in run.processes:
        by_gen: dict[str, list[Draw]] = {}
        how: dict[str, str] = {}
        for d in p.draws:
            if d.seeded is None:
                by_gen.setdefault(d.gen, []).append(d)
        for s in p.seeds:
            if s.get("how") in RANDOM_SEEDING:
                how[s["gen"]] = s["how"]
        random_seeded = {s["site"]: s["how"] for s in p.seeds if s.get("how") in RANDOM_SEEDING}
        for d in p.draws:
            if d.seeded is not None and d.seeded in random_seeded:
                by_gen.setdefault(d.gen, []).append(d)
        for gen, draws in sorted(by_gen.items()):
            draws.sort(key=lambda d: d.seq)
            chained = sum(c.count for (g, _, _), c in p.chains.items() if g == gen
                          and any(d.gen == g for d in draws))
            out.append(UnseededUse(p.display, gen, len(draws) + chained, draws[0],
                                   all(d.library for d in draws), how.get(gen)))
    return out


def seed_collisions(run: RunTrace) -> list[Collision]:
    """Replicas (processes of one actor class, or ranks) whose draws from a generator are
    identical: they were seeded alike, so they sample alike."""
    groups: dict[tuple[str, str], list[ProcessTrace]] = {}
    for p in run.processes:
        if p.kind in ("Ray actor", "multiprocessing child", "DataLoader worker", "subprocess"):
            # siblings: children and DataLoader workers carry their index in the label
            label = p.kind if p.kind in ("multiprocessing child", "DataLoader worker") else p.label
            groups.setdefault((p.kind, label), []).append(p)
    out = []
    for (_, label), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        gens = sorted({d.gen for p in members for d in p.draws})
        for gen in gens:
            streams: dict[tuple, list[ProcessTrace]] = {}
            for p in members:
                stream = tuple(d.key for d in p.generator_draws(gen))
                if stream:
                    streams.setdefault(stream, []).append(p)
            for stream, same in streams.items():
                if len(same) >= 2:
                    first = same[0].generator_draws(gen)[0]
                    out.append(Collision(members[0].display, gen, sorted(p.pid for p in same), len(stream), first))
    return out


@dataclass
class RunsTraceReport:
    """What ``record --trace`` / ``verify --trace`` add to their result."""

    comparison: TraceComparison | None  # None with one run, or when the runs' traces agree
    unseeded: list[UnseededUse]
    collisions: list[Collision]
    missing: list[str] = field(default_factory=list)  # runs without a trace dir


def audit_runs(trace_dirs: list[Path], reference: RunTrace | None = None,
               reference_labels: tuple[str, str] = ("reference", "this run")) -> RunsTraceReport:
    """Unseeded draws and collisions of the first run; with more runs, the first comparison
    (run 1 vs run k) whose traces differ, else the last one (identical). With ``reference``
    (e.g. the trace a standard carries): that trace against the first run instead."""
    missing = [f"run {i + 1}: no trace at {d}" for i, d in enumerate(trace_dirs) if not Path(d).is_dir()]
    present = [(i, Path(d)) for i, d in enumerate(trace_dirs) if Path(d).is_dir()]
    if not present:
        return RunsTraceReport(None, [], [], missing)
    first_index, first_dir = present[0]
    first = read_trace(first_dir)
    if reference is not None:
        return RunsTraceReport(compare_traces(reference, first, labels=reference_labels),
                               unseeded_uses(first), seed_collisions(first), missing)
    comparison = None
    for i, directory in present[1:]:
        comparison = compare_traces(first, read_trace(directory), labels=(f"run {first_index + 1}", f"run {i + 1}"))
        if not comparison.identical:
            break
    return RunsTraceReport(comparison, unseeded_uses(first), seed_collisions(first), missing)
