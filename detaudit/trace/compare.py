"""Compare traces: per process, the first draw, module call or torch op that differs between two
runs (or two machines); the draws from generators a process never seeded; seed collisions.

Returns data only; ``detaudit.render.trace`` words it.

Processes are matched across runs by (kind, label, actor name); replicas of one actor
class are paired by the longest common prefix of their records, so that replicas seeded by
rank pair with their counterparts. Processes that recorded nothing (an idle Ray worker) are
checked for completeness but not paired.

Each generator's draws are compared as a stream of their own (one more draw from Python's
``random`` in one run does not shift torch's). Draws made inside library internals (no frame of the recipe on the stack: Ray's own
``random`` calls) are compared apart from the recipe's: a difference there is reported, but it
is never "the first differing draw" and does not by itself make traces differ. What it does to
a generator the recipe draws from shows in the recipe's own draws.

Environment apart from computation (two machines): when both runs know their package
versions, the versions that differ come first; a torch op that differs inside a library whose
version differs (transformers' own start-up, say) is grouped under that library and never
decides; the first differing module call, and the first differing op elsewhere, are the
pipeline's own computation and decide whether the traces are identical.

Fail closed: traces are identical only when every process of both runs wrote a complete
ledger, in the same mode, for the same card, keeping as many records per site; otherwise the
comparison is incomplete, naming the process and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from detaudit.trace.arrival_order import ArrivalDifference, first_arrival_difference
from detaudit.trace.files import read_trace
from detaudit.trace.packages import PackageChange, package_changes, site_package, trace_packages
from detaudit.trace.run_trace import Chain, Draw, ModuleCall, OpCall, ProcessTrace, RunTrace
from detaudit.trace.seed_repeats import SeedCheck, seed_check


@dataclass
class DrawDifference:
    """The first draw in a pair of matched processes that differs."""

    process: str                  # display name, e.g. "RolloutManager (Ray actor)"
    kind: str                     # state, site (a different draw), missing (one run drew less), chain
    a: Draw | None
    b: Draw | None
    seeded_a: str | None = None   # where the process seeded this generator (None: never, or from the OS)
    seeded_b: str | None = None
    first_of_generator: bool = False
    draw_index: int = 0           # 1-based index among this process's draws from the generator
    chain: dict[str, Any] | None = None  # kind chain: gen, op, site, counts, after

    @property
    def draw(self) -> Draw:
        return self.a if self.a is not None else self.b  # type: ignore[return-value]

    @property
    def rank(self) -> tuple[int, float]:
        """Smaller is the likelier cause: an unseeded draw whose state differs first."""
        d = self.draw
        if self.kind == "chain":
            return (6, 0.0)
        unseeded = self.seeded_a is None or self.seeded_b is None
        if self.kind == "state":
            base = 0 if unseeded else 1
        elif self.kind == "site":
            base = 2
        else:
            base = 3
        return (base + (3 if d.library else 0), d.t)


CallT = TypeVar("CallT", ModuleCall, OpCall)
_KIND_ORDER = {"missing": 2, "after_kept": 3}  # "outputs": 0 with matching inputs, else 1


@dataclass
class _CallDifference(Generic[CallT]):
    """The first differing call (of a module, or of a torch op) of a pair of processes.

    ``kind``: ``outputs`` (call ``a.n`` of ``a.name`` gave different outputs), ``missing``
    (that call was made in one run only: ``a`` or ``b`` is it, the other None), ``after_kept``
    (only the hash chain of calls after the kept ones differs: ``a``/``b`` are the last kept
    calls, identical, so which later call differs, and whether its inputs matched, is unknown).
    """

    process: str
    a: CallT | None
    b: CallT | None
    kind: str = "outputs"

    @property
    def after_kept(self) -> bool:
        return self.kind == "after_kept"

    @property
    def call(self) -> CallT:
        call = self.a if self.a is not None else self.b
        assert call is not None  # a difference always holds the call of at least one run
        return call

    @property
    def inputs_match(self) -> bool:
        return self.kind == "outputs" and self.a is not None and self.b is not None and self.a.inputs == self.b.inputs

    @property
    def rank(self) -> tuple[int, int]:
        order = (0 if self.inputs_match else 1) if self.kind == "outputs" else _KIND_ORDER[self.kind]
        return (order, self.call.seq)


class ModuleDifference(_CallDifference[ModuleCall]):
    """The first differing module call of a pair of processes (kinds: ``_CallDifference``)."""


class OpDifference(_CallDifference[OpCall]):
    """The first differing torch op between modules (modules mode; kinds: ``_CallDifference``)."""


@dataclass
class ProcessComparison:
    """One pair of matched processes: what differs first, or nothing."""

    process: str
    pids: tuple[int, int]
    draw: DrawDifference | None = None          # the recipe's own draws
    library_draw: DrawDifference | None = None  # draws inside library internals
    module: ModuleDifference | None = None
    op: OpDifference | None = None               # the first in the pipeline's own computation
    arrival: ArrivalDifference | None = None  # results gathered in completion order (arrival_order.py)
    library_ops: list[OpDifference] = field(default_factory=list)  # inside libraries whose version differs

    @property
    def agree(self) -> bool:
        return self.draw is None and self.module is None and self.op is None and self.arrival is None


@dataclass
class LibraryDifferences:
    """The ops that differ inside one library whose version differs: the environment's doing,
    grouped under it, never the first difference of the pipeline's computation."""

    package: PackageChange
    ops: list[OpDifference] = field(default_factory=list)  # in the order they happened


@dataclass
class TraceComparison:
    labels: tuple[str, str]
    draw: DrawDifference | None = None
    module: ModuleDifference | None = None
    op: OpDifference | None = None  # the first differing op of the pipeline's own computation
    library_draw: DrawDifference | None = None
    arrival: ArrivalDifference | None = None
    arrival_differences: int = 0
    packages: list[PackageChange] = field(default_factory=list)  # versions that differ (both runs' known)
    libraries: list[LibraryDifferences] = field(default_factory=list)
    draw_differences: int = 0     # matched process pairs whose draws differ
    module_differences: int = 0
    op_differences: int = 0
    processes: list[ProcessComparison] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)   # processes in only one of the runs
    incomplete: list[str] = field(default_factory=list)  # why the answer may be partial

    @property
    def identical(self) -> bool:
        return (self.draw is None and self.module is None and self.op is None and self.arrival is None
                and not self.unmatched and not self.incomplete)


@dataclass
class UnseededUse:
    process: str
    generator: str
    count: int
    first: Draw
    library_only: bool
    how: str | None = None  # "torch.seed()" when seeded, but from the OS


@dataclass
class Collision:
    label: str
    generator: str
    pids: list[int]
    draws: int
    first: Draw


def _prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _keys(p: ProcessTrace) -> tuple[list[Any], list[Any]]:
    return ([d.key for d in p.draws if not d.library],
            [(m.name, m.n, m.inputs, m.outputs) for m in p.modules] + [(o.key, o.outputs) for o in p.ops])


def match_processes(a: RunTrace, b: RunTrace) -> tuple[list[tuple[ProcessTrace, ProcessTrace]], list[str]]:
    groups_b: dict[tuple[str, str, str], list[ProcessTrace]] = {}
    for p in b.processes:
        if not p.silent:
            groups_b.setdefault(p.group, []).append(p)
    pairs, unmatched = [], []
    for p in a.processes:
        if p.silent:
            continue
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


def _site_is_library(p: ProcessTrace, key: tuple[str, ...]) -> bool:
    """Whether the draws of a chain's call site were library-internal (unknown: the recipe's)."""
    return any(d.library for d in p.draws if (d.gen, d.op, d.site) == key)


def first_draw_difference(a: ProcessTrace, b: ProcessTrace, library: bool = False) -> DrawDifference | None:
    """The first difference in one of a process's two draw streams: the recipe's own draws, or
    (``library``) those made inside library internals."""
    draws_a = [d for d in a.draws if d.library == library]
    draws_b = [d for d in b.draws if d.library == library]
    # Each generator's stream is compared on its own: one more draw from Python's `random` (a
    # library imported in one environment only draws at import) does not shift torch's stream.
    # The first difference is the one the first run reached first.
    found: list[tuple[int, DrawDifference]] = []
    for gen in sorted({d.gen for d in draws_a} | {d.gen for d in draws_b}):
        stream_a = [d for d in draws_a if d.gen == gen]
        stream_b = [d for d in draws_b if d.gen == gen]
        difference = _first_stream_difference(a.display, stream_a, stream_b)
        if difference is not None:
            found.append(difference)
    if found:
        return min(found, key=lambda f: f[0])[1]
    keys = [k for k in sorted(set(a.chains) | set(b.chains))
            if (_site_is_library(a, k) or _site_is_library(b, k)) == library]
    for key in keys:
        ca, cb = a.chains.get(key), b.chains.get(key)
        if ca is None or cb is None or ca.differs(cb):
            gen, op, site = key
            last = next((d for d in reversed(draws_a or draws_b) if (d.gen, d.op, d.site) == key), None)
            proto = last or Draw(0, gen, op, site, library, 0, "", None)
            return DrawDifference(a.display, "chain", proto, None, proto.seeded, proto.seeded, False, 0,
                                  chain={"generator": gen, "op": op, "site": site, "count_a": ca.count if ca else 0,
                                         "count_b": cb.count if cb else 0})
    return None


def _first_stream_difference(process: str, stream_a: list[Draw], stream_b: list[Draw]) -> tuple[int, DrawDifference] | None:
    """(order, difference) of the first difference between two runs' draws from one generator;
    order: the draw's sequence number in the run that made it (the first run's when both did)."""
    for i, (x, y) in enumerate(zip(stream_a, stream_b, strict=False)):
        if x.key != y.key:
            kind = "state" if (x.op, x.site) == (y.op, y.site) else "site"
            return x.seq, DrawDifference(process, kind, x, y, x.seeded, y.seeded, i == 0, i + 1)
    if len(stream_a) == len(stream_b):
        return None
    i = min(len(stream_a), len(stream_b))
    only_a = stream_a[i] if i < len(stream_a) else None
    only_b = stream_b[i] if i < len(stream_b) else None
    d = only_a or only_b
    assert d is not None  # the lengths differ, so the longer stream has a draw at i
    return d.seq, DrawDifference(process, "missing", only_a, only_b, d.seeded, d.seeded, i == 0, i + 1)


def _calls_differ(kind: type, process: str, calls_a: list[Any], calls_b: list[Any], key: Any,
                  chains_a: dict[Any, Chain], chains_b: dict[Any, Chain], chain_name: Any,
                  proto: Any) -> list[Any]:
    """Every kept call that differs (matched by ``key``: name and call number) and, per chained
    name whose chains differ, one ``after_kept`` difference naming its last kept calls (or
    ``proto(name)`` when none was kept)."""
    by_a = {key(c): c for c in calls_a}
    by_b = {key(c): c for c in calls_b}
    out = []
    for k in sorted(set(by_a) | set(by_b), key=lambda k: (by_a.get(k) or by_b[k]).seq):
        x, y = by_a.get(k), by_b.get(k)
        if x is None or y is None:
            out.append(kind(process, x, y, "missing"))
        elif x.outputs != y.outputs:
            out.append(kind(process, x, y))
    for name in sorted(set(chains_a) | set(chains_b)):
        ca, cb = chains_a.get(name), chains_b.get(name)
        if ca is not None and cb is not None and not ca.differs(cb):
            continue
        last_a = next((c for c in reversed(calls_a) if chain_name(c) == name), None)
        last_b = next((c for c in reversed(calls_b) if chain_name(c) == name), None)
        if last_a is None and last_b is None:
            last_a = proto(name)
        out.append(kind(process, last_a, last_b, "after_kept"))
    return out


def first_module_difference(a: ProcessTrace, b: ProcessTrace) -> ModuleDifference | None:
    """The first call whose inputs match and outputs differ; else the first whose outputs differ
    (its inputs differ too: the change came from outside any module); else a call made in one
    run only; else a later call, beyond the kept ones, that differs (by its hash chain).

    Calls are matched by module name and call number, so threads that interleave calls
    differently do not make them differ."""
    found = _calls_differ(ModuleDifference, a.display, a.modules, b.modules, lambda m: (m.name, m.n),
                          a.module_chains, b.module_chains, lambda m: m.name,
                          lambda name: ModuleCall(0, name, "?", 0, "", ""))
    after = [d for d in found if d.after_kept]
    if after and len(after) == len(found):
        # innermost first (a parent's outputs differ whenever a child's do), kept in both runs first
        names = [d.call.name for d in after]
        inner = [d for d in after if not any(other.startswith(d.call.name + ".") for other in names)]
        ordered = inner + [d for d in after if d not in inner]
        return next((d for d in ordered if d.a is not None and d.b is not None), ordered[0])
    return min(found, key=lambda d: d.rank, default=None)


def op_differences(a: ProcessTrace, b: ProcessTrace) -> list[OpDifference]:
    """Every kept op call that differs, and one per op whose chain of later calls differs."""
    return _calls_differ(OpDifference, a.display, a.ops, b.ops, lambda o: o.key, a.op_chains, b.op_chains,
                         lambda o: (o.name, o.at), lambda key: OpCall(0, key[0], key[1], "?", 0, "", ""))


def first_op_difference(a: ProcessTrace, b: ProcessTrace) -> OpDifference | None:
    """As ``first_module_difference``, for the torch ops called outside any module."""
    return min(op_differences(a, b), key=lambda d: d.rank, default=None)


def compare_traces(a: RunTrace, b: RunTrace, labels: tuple[str, str] = ("run 1", "run 2")) -> TraceComparison:
    pairs, unmatched = match_processes(a, b)
    incomplete = [f"{labels[0]}: {text}" for text in a.problems] + [f"{labels[1]}: {text}" for text in b.problems]
    same_mode = a.mode == b.mode
    if not same_mode:
        incomplete.append(f"{labels[0]} was traced in {a.mode or 'no one'} mode, {labels[1]} in {b.mode or 'no one'} "
                          "mode: only their draws are compared")
    if a.card is not None and b.card is not None and a.card != b.card:
        incomplete.append(f"{labels[0]} traced card {a.card!r}, {labels[1]} card {b.card!r}")
    if a.keep is not None and b.keep is not None and a.keep != b.keep:
        incomplete.append(f"{labels[0]} kept {a.keep} records per call site, {labels[1]} {b.keep}: set "
                          "DETAUDIT_TRACE_KEEP alike")
    result = TraceComparison(labels, unmatched=unmatched, incomplete=incomplete,
                             packages=package_changes(a.packages, b.packages, trace_packages(a) | trace_packages(b)))
    changed = {c.name: c for c in result.packages}
    grouped: dict[str, LibraryDifferences] = {}
    for x, y in pairs:
        pc = ProcessComparison(x.display, (x.pid, y.pid), first_draw_difference(x, y),
                               first_draw_difference(x, y, library=True), arrival=first_arrival_difference(x, y))
        if same_mode:
            pc.module = first_module_difference(x, y)
            ops = op_differences(x, y)
            # An op inside a library whose version differs is that version's doing; its effect on
            # the pipeline's computation shows in the modules and ops its tensors reach.
            pc.library_ops = [o for o in ops if site_package(o.call.at) in changed]
            pc.op = min((o for o in ops if o not in pc.library_ops), key=lambda d: d.rank, default=None)
            for o in pc.library_ops:
                package = changed[site_package(o.call.at)]
                grouped.setdefault(package.name, LibraryDifferences(package)).ops.append(o)
        result.processes.append(pc)
    for group in grouped.values():
        group.ops.sort(key=lambda o: o.call.t)
    result.libraries = sorted(grouped.values(), key=lambda g: g.ops[0].call.t)
    draws = [p.draw for p in result.processes if p.draw is not None]
    modules = [p.module for p in result.processes if p.module is not None]
    ops = [p.op for p in result.processes if p.op is not None]
    library = [p.library_draw for p in result.processes if p.library_draw is not None]
    result.draw_differences, result.module_differences, result.op_differences = len(draws), len(modules), len(ops)
    result.draw = min(draws, key=lambda d: d.rank, default=None)
    result.library_draw = min(library, key=lambda d: d.rank, default=None)
    result.module = min(modules, key=lambda m: m.rank, default=None)
    result.op = min(ops, key=lambda o: o.rank, default=None)
    arrivals = [p.arrival for p in result.processes if p.arrival is not None]
    result.arrival_differences = len(arrivals)
    result.arrival = min(arrivals, key=lambda d: d.gather.get("t") or 0.0, default=None)  # the earliest, by clock
    return result


def unseeded_uses(run: RunTrace) -> list[UnseededUse]:
    """Per process and generator: the draws made while the process had not seeded it, or had
    seeded it from the OS (``random.seed()``, ``torch.seed()``, a fork's reseed of ``random``)."""
    out = []
    for p in run.processes:
        by_gen: dict[str, list[Draw]] = {}
        for d in p.draws:
            if d.seeded is None:
                by_gen.setdefault(d.gen, []).append(d)
        for gen, draws in sorted(by_gen.items()):
            draws.sort(key=lambda d: d.seq)
            sites = {(d.gen, d.op, d.site) for d in draws}
            chained = sum(c.count for key, c in p.chains.items() if key in sites)
            how = next((d.entropy for d in draws if d.entropy), None)
            out.append(UnseededUse(p.display, gen, len(draws) + chained, draws[0],
                                   all(d.library for d in draws), how))
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
    for _, members in sorted(groups.items()):
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

    comparison: TraceComparison | None  # None with one run and no reference
    unseeded: list[UnseededUse]
    collisions: list[Collision]
    missing: list[str] = field(default_factory=list)  # runs without a trace dir
    incomplete: list[str] = field(default_factory=list)  # without a comparison: the run's own trace problems
    first_complete: bool = True  # the run ``unseeded`` and ``collisions`` read has a complete trace
    # The traces as read (by run index) and the reference: reports draw from these, never read again.
    traces: dict[int, RunTrace] = field(default_factory=dict, repr=False)
    reference: RunTrace | None = field(default=None, repr=False)
    seeds: SeedCheck | None = None  # seeds repeated within a step, in the first run (seed_repeats.py)


def audit_runs(trace_dirs: list[Path], reference: RunTrace | None = None,
               reference_labels: tuple[str, str] = ("reference", "this run"),
               packages: dict[str, str] | None = None) -> RunsTraceReport:
    """Unseeded draws and collisions of the first run; with more runs, the first comparison
    (run 1 vs run k) whose traces differ, else the last one (identical). With ``reference``
    (e.g. the trace a standard carries): that trace against the first run instead, whose
    environment's package versions are ``packages``. Without either, the first run's own trace
    problems (``incomplete``)."""
    missing = [f"run {i + 1}: no trace at {d}" for i, d in enumerate(trace_dirs) if not Path(d).is_dir()]
    present = [(i, Path(d)) for i, d in enumerate(trace_dirs) if Path(d).is_dir()]
    if not present:
        return RunsTraceReport(None, [], [], missing, first_complete=False)
    first_index, first_dir = present[0]
    first = read_trace(first_dir)
    first.packages = packages  # this run's environment (the reference's comes with it)
    complete = not first.problems and first_index == 0
    if reference is not None:
        return RunsTraceReport(compare_traces(reference, first, labels=reference_labels),
                               unseeded_uses(first), seed_collisions(first), missing, first_complete=complete,
                               traces={first_index: first}, reference=reference, seeds=seed_check(first))
    comparison = None
    traces = {first_index: first}
    for i, directory in present[1:]:
        traces[i] = read_trace(directory)
        comparison = compare_traces(first, traces[i], labels=(f"run {first_index + 1}", f"run {i + 1}"))
        if not comparison.identical:
            break
    own = [] if comparison is not None else [f"run {first_index + 1}: {text}" for text in first.problems]
    return RunsTraceReport(comparison, unseeded_uses(first), seed_collisions(first), missing, own, complete, traces,
                           seeds=seed_check(first))
