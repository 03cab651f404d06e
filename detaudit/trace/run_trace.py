"""A run's trace as data: per process its ledger's records (``ProcessTrace``: draws, module
calls, ops, spawns, chains), the run's processes (``RunTrace``), and what makes it incomplete.
``files.read_trace`` builds it.

A run's trace is complete when every process the run started wrote a whole ledger: one that
starts with a ``start`` record and ends with an ``end`` record, in the same mode and for the
same card as the others, and every Python process a traced process started (its ``spawn``
records) left a ledger of its own (or a ``skip`` record: one of Ray's own daemons). A ledger
written through (every record on disk before its call returned, chain tails in its ``.tail``
file) without an end is complete too when its process was ended by its parent: a traced
process sent it a signal (a compile-worker pool terminating its workers), or it was still
running when the main process exited (the main ledger lists those) and the run's clean-up
ended it. Anything else is a ``problem``, naming the process and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROCESS_WORDS = {"main": "main process", "Ray actor": "Ray actor", "Ray task": "Ray task", "Ray worker": "Ray worker",
                 "multiprocessing child": "multiprocessing child", "DataLoader worker": "DataLoader worker",
                 "subprocess": "subprocess"}


@dataclass
class Draw:
    seq: int
    gen: str
    op: str
    site: str
    library: bool
    n: int
    state: str
    seeded: str | None
    t: float = 0.0
    task: str | None = None
    entropy: str | None = None  # seeded, but from the OS (``random.seed()``, a fork): how

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.gen, self.op, self.site, self.state)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "generator": self.gen, "op": self.op, "site": self.site, "library": self.library,
                "n": self.n, "state": self.state, "seeded": self.seeded, "seeded_from_os": self.entropy,
                "task": self.task}


@dataclass
class ModuleCall:
    seq: int
    name: str
    cls: str
    n: int
    inputs: str
    outputs: str
    t: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "module": self.name, "class": self.cls, "call": self.n, "inputs": self.inputs,
                "outputs": self.outputs}


@dataclass
class OpCall:
    """A torch op called outside any module (modules mode)."""

    seq: int
    name: str
    at: str     # the innermost frame outside torch
    site: str   # the first frame outside the libraries
    n: int
    inputs: str
    outputs: str
    t: float = 0.0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.name, self.at, self.n)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "op": self.name, "at": self.at, "site": self.site, "call": self.n,
                "inputs": self.inputs, "outputs": self.outputs}


@dataclass
class Spawn:
    """A process this one started (``exec``: this one became it, under the same pid)."""

    child: int
    argv: list[str]
    via: str
    python: bool


@dataclass
class Chain:
    """Draws (or calls) beyond the kept ones at one site: hash-chain checkpoints by count."""

    points: dict[int, str] = field(default_factory=dict)
    final: int | None = None  # the count at exit, when the process got to write it

    @property
    def count(self) -> int:
        return self.final if self.final is not None else max(self.points, default=0)

    def differs(self, other: Chain) -> bool:
        """Fail closed on what both show: the chain at the largest count both reached, and
        the final counts when both processes wrote them."""
        common = set(self.points) & set(other.points)
        if common:
            at = max(common)
            if self.points[at] != other.points[at]:
                return True
        elif self.points or other.points:
            return True
        return self.final is not None and other.final is not None and self.final != other.final


@dataclass
class ProcessTrace:
    path: Path
    pid: int = 0
    kind: str = "subprocess"
    label: str = "process"
    actor_name: str = ""
    draws: list[Draw] = field(default_factory=list)
    seeds: list[dict[str, Any]] = field(default_factory=list)
    chains: dict[tuple[str, ...], Chain] = field(default_factory=dict)
    modules: list[ModuleCall] = field(default_factory=list)
    module_chains: dict[str, Chain] = field(default_factory=dict)
    ops: list[OpCall] = field(default_factory=list)
    op_chains: dict[tuple[str, str], Chain] = field(default_factory=dict)
    spawns: list[Spawn] = field(default_factory=list)
    execs: list[Spawn] = field(default_factory=list)
    # Read and compared by arrival_order.py and seed_repeats.py: the records as written.
    arrivals: list[dict[str, Any]] = field(default_factory=list)
    arrival_chains: dict[str, Chain] = field(default_factory=dict)
    seed_values: list[dict[str, Any]] = field(default_factory=list)
    seed_groups: list[dict[str, Any]] = field(default_factory=list)
    mode: str | None = None     # from the start record; None: the ledger has none
    card: str | None = None
    keep: int | None = None
    argv: list[str] = field(default_factory=list)
    ended: bool = False         # the last record is an ``end``
    skipped: str | None = None  # not traced on purpose (a Ray daemon): why
    ppid: int = 0
    through: bool = False       # written through: every record on disk before its call returned
    signals: list[tuple[int, int]] = field(default_factory=list)  # (target pid, signal) this process sent
    left: list[int] = field(default_factory=list)  # the main process: pids still running when it exited
    tail: str | None = None     # the file of its chains' latest counts (``recorder._write_tail``)
    tail_slot: int = 0
    ended_by: str | None = None  # no end, but ended by its parent (set by ``read_trace``): how
    records: int = 0            # lines read

    @property
    def group(self) -> tuple[str, str, str]:
        """What identifies this process across runs (replicas share it)."""
        return (self.kind, self.label, self.actor_name)

    @property
    def display(self) -> str:
        name = f" {self.actor_name!r}" if self.actor_name else ""
        if self.kind == "main":
            return "main process"
        return f"{self.label}{name} ({PROCESS_WORDS.get(self.kind, self.kind)})"

    @property
    def silent(self) -> bool:
        """Nothing to compare: no draw, seed, module call or op (an idle Ray worker)."""
        return not (self.draws or self.seeds or self.chains or self.modules or self.module_chains or self.ops
                    or self.op_chains or self.arrivals or self.arrival_chains or self.seed_values)

    @property
    def started(self) -> bool:
        return self.mode is not None

    def problems(self) -> list[str]:
        """Why this ledger is not complete (empty: it is)."""
        out = []
        if not self.started:
            out.append("its ledger has no start record (written by an older detaudit?)")
        if not self.ended and self.ended_by is None:
            if self.through:
                out.append("its ledger has no end: the process was killed by something the tracer did not see "
                           "(every record it made up to then is in its ledger)")
            else:
                out.append("its ledger has no end: the process was killed, or left before the tracer could write "
                           "its last records, so its later draws are unknown")
        return out

    def generator_draws(self, gen: str) -> list[Draw]:
        return [d for d in self.draws if d.gen == gen]


@dataclass
class RunTrace:
    path: Path
    processes: list[ProcessTrace]
    errors: list[str] = field(default_factory=list)    # what the tracer noted it could not do
    skipped: list[ProcessTrace] = field(default_factory=list)  # Ray's own daemons, by design
    card: str | None = None      # the card the ledgers say (a saved trace: its meta.json)
    mode: str | None = None      # the one mode of every ledger (None: none, or several)
    keep: int | None = None
    packages: dict[str, str] | None = None  # distribution -> version of the run's environment, when known

    @property
    def problems(self) -> list[str]:
        """Why this run's trace is incomplete, one line per cause, each naming the process."""
        return self.errors + completeness_problems(self)

    @property
    def ended_by_parent(self) -> list[str]:
        """Processes that left no ``end`` but were ended by their parent, one line each (not a
        problem: their ledgers were written through)."""
        return [f"pid {p.pid} {p.display}: {p.ended_by}" for p in self.processes if not p.ended and p.ended_by]


def _ending_signals() -> frozenset[int]:
    import signal

    names = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGABRT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    return frozenset(int(getattr(signal, n)) for n in names if hasattr(signal, n))


_ENDING = _ending_signals()  # signals whose default action ends a process (0, SIGCHLD, SIGCONT... do not)


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def explain_ends(processes: list[ProcessTrace]) -> None:
    """Set ``ended_by`` of each written-through ledger without an end whose process was ended
    by its parent: a traced process sent it a signal (a pool terminating its workers), or it was
    still running when an ancestor closed its ledger (a Ray actor's compile-worker pool, which Ray
    ends with the actor) or when the main process exited (the run's clean-up, its group kill,
    ends what is left). Its ledger holds every record it made, so nothing of it is unknown; one
    that holds nothing but its start (an idle Ray worker the raylet ended) recorded nothing. Any
    other end (a crash, a kill the tracer did not see, after it recorded something) stays a problem."""
    senders: dict[int, tuple[ProcessTrace, int]] = {}
    left: dict[int, ProcessTrace] = {}
    for p in processes:
        for target, signum in p.signals:
            if target != p.pid and signum in _ENDING:
                senders.setdefault(target, (p, signum))
        for pid in p.left:
            if pid not in left or left[pid].kind == "main":  # the nearest ancestor says it best
                left[pid] = p
    for p in processes:
        if p.ended or not p.through or not p.started:
            continue
        if p.pid in senders:
            sender, signum = senders[p.pid]
            who = "its parent" if sender.pid == p.ppid else sender.display
            p.ended_by = f"ended by {who} (pid {sender.pid}, {_signal_name(signum)}); every record it made is in its ledger"
        elif p.records == 1:
            p.ended_by = ("ended before it recorded anything (an idle worker its pool or Ray ended at shutdown): "
                          "nothing of it is unknown")
        elif p.pid in left:
            closer = left[p.pid]
            who = "the main process" if closer.kind == "main" else closer.display
            by = "the run's clean-up" if closer.kind == "main" else "its parent's end (Ray ends an actor's children)"
            p.ended_by = (f"still running when {who} (pid {closer.pid}) ended, ended by {by}; every record it made "
                          "is in its ledger")


def completeness_problems(run: RunTrace) -> list[str]:
    out = []
    if not run.processes:
        out.append("no process wrote a ledger (the tracer did not start in this run)")
    elif not any(p.kind == "main" for p in run.processes):
        out.append("the main process wrote no ledger")
    for p in run.processes:
        out += [f"pid {p.pid} {p.display}: {problem}" for problem in p.problems()]
    modes = sorted({p.mode for p in run.processes if p.mode is not None})
    if len(modes) > 1:
        out.append("its ledgers were written in different modes: " + ", ".join(
            f"{m} ({', '.join(str(p.pid) for p in run.processes if p.mode == m)})" for m in modes))
    cards = sorted({p.card for p in run.processes if p.card is not None})
    if len(cards) > 1 or (cards and run.card is not None and cards != [run.card]):
        out.append(f"its ledgers name different cards: {', '.join(dict.fromkeys(([run.card] if run.card else []) + cards))}")
    keeps = sorted({p.keep for p in run.processes if p.keep is not None})
    if len(keeps) > 1:
        out.append(f"its ledgers kept different numbers of records per call site: {', '.join(map(str, keeps))}")
    ledgers: dict[int, int] = {}
    for p in run.processes + run.skipped:
        ledgers[p.pid] = ledgers.get(p.pid, 0) + 1
    # Per pid, the ledgers it owes: one if a traced process started it as Python (or it wrote
    # one), and one more for each Python program it replaced itself with (``exec``).
    spawned: dict[int, tuple[ProcessTrace, Spawn]] = {}
    execs: dict[int, list[tuple[ProcessTrace, Spawn]]] = {}
    for p in run.processes:
        for spawn in p.spawns:
            if spawn.python:
                spawned[spawn.child] = (p, spawn)
        for spawn in p.execs:
            if spawn.python:
                execs.setdefault(p.pid, []).append((p, spawn))
    for pid in sorted(set(spawned) | set(execs)):
        missing = (1 if pid in spawned or pid in ledgers else 0) + len(execs.get(pid, [])) - ledgers.get(pid, 0)
        causes = list(reversed(execs.get(pid, []))) + ([spawned[pid]] if pid in spawned else [])
        for parent, spawn in causes[:max(0, missing)]:
            command = " ".join(spawn.argv) or "?"
            how = ("it replaced itself with" if spawn.via == "exec" else
                   f"started by {parent.display} (pid {parent.pid}) through {spawn.via}:")
            out.append(f"pid {pid} ({how} {command}) was not traced: a Python started with -I, -E or -S, or "
                       "without the run's environment, keeps the tracer out")
    return out
