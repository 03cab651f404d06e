"""Read a trace dir (one ``<process>.<pid>.jsonl`` ledger per process) into data, and say
what makes it incomplete.

Every line is checked against the record it claims to be (a wrong type is a one-line
``InputError`` naming the file and line, never a traceback); files are read with bounds (a
ledger, a line, ``meta.json``), and only regular files are read at all.

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

import itertools
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.errors import InputError

PROCESS_WORDS = {"main": "main process", "Ray actor": "Ray actor", "Ray task": "Ray task", "Ray worker": "Ray worker",
                 "multiprocessing child": "multiprocessing child", "DataLoader worker": "DataLoader worker",
                 "subprocess": "subprocess"}
MAX_LEDGER_BYTES = 1 << 30   # a ledger keeps `keep` records per site, then hash chains: far below
MAX_LINE_BYTES = 1 << 20
MAX_NOTE_BYTES = 64 << 10    # error.<pid>.txt: what the tracer could not do


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


# --- reading --------------------------------------------------------------------------------------

_INT, _STR, _BOOL, _NUM, _STRS = "a whole number", "a string", "true or false", "a number", "a list of strings"
_GROUPS = "a list of lists of strings or whole numbers"
_INTS = "a list of whole numbers"
_OPT = "?"  # suffix: may be absent or null
RECORDS: dict[str, dict[str, str]] = {
    "start": {"pid": _INT, "ppid": _INT, "mode": _STR, "card": _STR + _OPT, "keep": _INT, "argv": _STRS,
              "through": _BOOL + _OPT, "t": _NUM + _OPT},
    "process": {"pid": _INT, "kind": _STR, "label": _STR, "argv0": _STR + _OPT, "actor_name": _STR + _OPT,
                "actor_class": _STR + _OPT, "task": _STR + _OPT, "named": _BOOL + _OPT},
    "seed": {"gen": _STR, "site": _STR, "how": _STR, "seq": _INT, "library": _BOOL, "entropy": _BOOL + _OPT},
    "draw": {"seq": _INT, "gen": _STR, "op": _STR, "site": _STR, "library": _BOOL, "n": _INT, "state": _STR,
             "seeded": _STR + _OPT, "t": _NUM + _OPT, "task": _STR + _OPT, "entropy": _STR + _OPT,
             "seeded_inherited": _BOOL + _OPT},
    "module": {"seq": _INT, "name": _STR, "cls": _STR, "n": _INT, "in": _STR, "out": _STR, "t": _NUM + _OPT},
    "op": {"seq": _INT, "name": _STR, "at": _STR, "site": _STR, "n": _INT, "in": _STR, "out": _STR,
           "t": _NUM + _OPT},
    "chain": {"kind": _STR, "count": _INT, "chain": _STR, "after": _INT + _OPT, "final": _BOOL + _OPT,
              "gen": _STR + _OPT, "op": _STR + _OPT, "site": _STR + _OPT, "name": _STR + _OPT, "at": _STR + _OPT},
    "spawn": {"seq": _INT, "child": _INT, "argv": _STRS, "via": _STR, "python": _BOOL},
    "exec": {"seq": _INT, "argv": _STRS, "python": _BOOL},
    "exec_failed": {"seq": _INT},
    "end": {"pid": _INT, "seq": _INT, "t": _NUM + _OPT},
    "arrival": {"seq": _INT, "api": _STR, "site": _STR, "n": _INT, "order": _GROUPS, "caller": _STR, "items": _INT,
                "complete": _BOOL, "stable": _BOOL, "t": _NUM + _OPT},
    "seed_value": {"seq": _INT, "api": _STR, "site": _STR, "value": _STR, "t": _NUM + _OPT},
    "seed_group": {"seq": _INT, "api": _STR, "site": _STR, "step": _STR, "call": _INT, "seeds": _INT, "distinct": _INT,
                   "repeated": _GROUPS, "repeated_values": _INT, "overflow": _BOOL, "t": _NUM + _OPT},
    "signal": {"seq": _INT, "target": _INT, "signal": _INT},
    "left": {"pids": _INTS},
    "tail": {"file": _STR, "slot": _INT},
    "skip": {"pid": _INT, "why": _STR, "argv": _STRS},
}
CHAIN_KEYS = {"draw": ("gen", "op", "site"), "module": ("name",), "op": ("name", "at"), "arrival": ("site",),
              "seed_value": ("site",)}


def _check(value: Any, kind: str) -> bool:
    if kind == _INT:
        return type(value) is int and -(1 << 63) <= value < (1 << 63)
    if kind == _STR:
        return type(value) is str
    if kind == _BOOL:
        return type(value) is bool
    if kind == _NUM:
        return type(value) in (int, float) and math.isfinite(value)
    if kind == _GROUPS:
        return type(value) is list and all(type(g) is list and all(type(v) in (str, int) for v in g) for g in value)
    if kind == _INTS:
        return type(value) is list and all(type(v) is int for v in value)
    return type(value) is list and all(type(v) is str for v in value)


def checked_record(rec: Any) -> dict[str, Any]:
    """``rec`` if it is a ledger record with the fields its type needs; else ValueError."""
    if type(rec) is not dict:
        raise ValueError("not a JSON object")
    kind = rec.get("type")
    fields = RECORDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise ValueError(f"unknown record type {kind!r}")
    for name, spec in fields.items():
        optional = spec.endswith(_OPT)
        kind_of = spec.rstrip(_OPT)
        value = rec.get(name)
        if value is None and optional:
            continue
        if name not in rec:
            raise ValueError(f"{kind} record without {name!r}")
        if not _check(value, kind_of):
            raise ValueError(f"{name!r} of a {kind} record is not {kind_of}: {value!r}"[:200])
    if kind == "chain":
        keys = CHAIN_KEYS.get(rec["kind"])
        if keys is None:
            raise ValueError(f"unknown chain kind {rec['kind']!r}")
        for name in keys:
            if type(rec.get(name)) is not str:
                raise ValueError(f"{rec['kind']} chain record without {name!r}")
        if rec["count"] < 0:
            raise ValueError(f"'count' of a chain record is negative: {rec['count']}")
    return rec


def regular_file(path: Path, what: str, limit: int) -> int:
    """The size of ``path`` if it is a regular file of at most ``limit`` bytes; else InputError
    (a device such as /dev/zero, a FIFO, or a huge file is never read)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(path, f"not a regular file; not {what}")
    if info.st_size > limit:
        raise InputError(path, f"larger than {limit >> 20} MiB; not {what}")
    return info.st_size


def read_process(path: Path) -> ProcessTrace:
    proc = ProcessTrace(path)
    identity: dict[str, Any] | None = None
    last: str | None = None
    regular_file(path, "a detaudit trace", MAX_LEDGER_BYTES)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read trace: {exc.strerror or exc}") from None
    total = 0
    with fh:
        for number in itertools.count(1):
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES or total > MAX_LEDGER_BYTES:
                raise InputError(path, f"line longer than {MAX_LINE_BYTES >> 20} MiB; not a detaudit trace", number)
            if not raw.endswith(b"\n"):
                last = None  # a process killed mid-write: the torn line is dropped, the ledger has no end
                break
            try:
                rec = checked_record(json.loads(raw.decode("utf-8")))
                last = _apply(proc, rec, number)
                proc.records += 1
                if rec["type"] == "process":
                    # A Ray worker that became an actor keeps the actor identity.
                    if identity is None or identity.get("kind") != "Ray actor" or rec.get("kind") == "Ray actor":
                        identity = rec
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise InputError(path, f"not a detaudit trace line: {exc}", number) from None
    proc.ended = last == "end"
    if proc.tail is not None:
        _read_tail(proc, path.parent / proc.tail)
    if identity is not None:
        proc.pid = identity["pid"]
        proc.kind = identity["kind"]
        proc.label = identity["label"]
        proc.actor_name = identity.get("actor_name") or ""
    return proc


def _read_tail(proc: ProcessTrace, path: Path) -> None:
    """The chains' latest counts and hashes from a ledger's tail file (fixed slots, each one chain
    record): checkpoints beyond the ledger's own lines. A slot never written is blank."""
    regular_file(path, "a detaudit trace's tail file", MAX_LEDGER_BYTES)
    data = path.read_bytes()
    for index in range(0, len(data), proc.tail_slot):
        raw = data[index:index + proc.tail_slot].strip(b" \n\x00")
        if not raw:
            continue
        try:
            rec = checked_record(json.loads(raw.decode("utf-8")))
            if rec["type"] != "chain":
                raise ValueError(f"a {rec['type']} record")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InputError(path, f"not a detaudit tail slot (slot {index // proc.tail_slot}): {exc}") from None
        rec.pop("final", None)  # a tail is a checkpoint, never the count at exit
        _apply(proc, rec, 0)


def _apply(proc: ProcessTrace, rec: dict[str, Any], number: int) -> str:
    """Add one checked record to ``proc``; return its type."""
    kind = rec["type"]
    if kind == "start":
        if number != 1:
            raise ValueError("a start record after the first line")
        proc.pid, proc.mode, proc.card, proc.keep, proc.argv = rec["pid"], rec["mode"], rec.get("card"), rec["keep"], \
            rec["argv"]
        proc.ppid, proc.through = rec["ppid"], bool(rec.get("through"))
    elif kind == "skip":
        if number != 1:
            raise ValueError("a skip record after the first line")
        proc.pid, proc.skipped, proc.argv = rec["pid"], rec["why"], rec["argv"]
    elif kind == "draw":
        proc.draws.append(Draw(rec["seq"], rec["gen"], rec["op"], rec["site"], rec["library"], rec["n"], rec["state"],
                               rec.get("seeded"), rec.get("t") or 0.0, rec.get("task"), rec.get("entropy")))
    elif kind == "seed":
        proc.seeds.append(rec)
    elif kind == "module":
        proc.modules.append(ModuleCall(rec["seq"], rec["name"], rec["cls"], rec["n"], rec["in"], rec["out"],
                                       rec.get("t") or 0.0))
    elif kind == "op":
        proc.ops.append(OpCall(rec["seq"], rec["name"], rec["at"], rec["site"], rec["n"], rec["in"], rec["out"],
                               rec.get("t") or 0.0))
    elif kind == "chain":
        if rec["kind"] == "draw":
            chain = proc.chains.setdefault((rec["gen"], rec["op"], rec["site"]), Chain())
        elif rec["kind"] == "op":
            chain = proc.op_chains.setdefault((rec["name"], rec["at"]), Chain())
        elif rec["kind"] == "arrival":
            chain = proc.arrival_chains.setdefault(rec["site"], Chain())
        elif rec["kind"] == "seed_value":  # seeds beyond the kept ones: their steps are in seed_group records
            chain = Chain()
        else:
            chain = proc.module_chains.setdefault(rec["name"], Chain())
        chain.points[rec["count"]] = rec["chain"]
        if rec.get("final"):
            chain.final = rec["count"]
    elif kind == "arrival":
        proc.arrivals.append(rec)
    elif kind == "seed_value":
        proc.seed_values.append(rec)
    elif kind == "seed_group":
        proc.seed_groups.append(rec)
    elif kind == "spawn":
        proc.spawns.append(Spawn(rec["child"], rec["argv"], rec["via"], rec["python"]))
    elif kind == "exec":
        proc.execs.append(Spawn(proc.pid, rec["argv"], "exec", rec["python"]))
    elif kind == "signal":
        proc.signals.append((rec["target"], rec["signal"]))
    elif kind == "left":
        proc.left = rec["pids"]
    elif kind == "tail":
        name = rec["file"]
        if os.sep in name or name.startswith(".") or not name.endswith(".tail") or rec["slot"] <= 0:
            raise ValueError(f"a tail record naming {name!r}"[:200])
        proc.tail, proc.tail_slot = name, rec["slot"]
    elif kind == "exec_failed":
        if proc.execs:
            proc.execs.pop()
    return kind


def read_trace(directory: str | Path, card: str | None = None) -> RunTrace:
    """All processes of one run's trace dir, in a stable order (kind, label, pid). ``card``:
    the card a saved trace's ``meta.json`` names (checked against its ledgers)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, "no trace here (was the run started with --trace?)")
    processes: list[ProcessTrace] = []
    skipped: list[ProcessTrace] = []
    for path in sorted(directory.glob("*.jsonl")):
        proc = read_process(path)
        (skipped if proc.skipped is not None else processes).append(proc)
    errors = []
    for path in sorted(directory.glob("error.*.txt")):
        regular_file(path, "a trace note", MAX_NOTE_BYTES)
        text = path.read_bytes()[:MAX_NOTE_BYTES].decode("utf-8", errors="replace").strip()
        errors.append(f"pid {path.name.split('.')[1]}: {text}")
    processes.sort(key=lambda p: (p.kind != "main", p.kind, p.label, p.actor_name, p.pid, p.path.name))
    explain_ends(processes)
    modes = {p.mode for p in processes}
    keeps = {p.keep for p in processes}
    cards = {p.card for p in processes}
    return RunTrace(directory, processes, errors, skipped,
                    card=card if card is not None else (next(iter(cards)) if len(cards) == 1 else None),
                    mode=next(iter(modes)) if len(modes) == 1 else None,
                    keep=next(iter(keeps)) if len(keeps) == 1 else None)
