"""Read a trace dir (one ``<process>.<pid>.jsonl`` ledger per process) into a ``RunTrace``
(``run_trace``: the data, and what makes it incomplete).

Every line is checked against the record it claims to be (a wrong type is a one-line
``InputError`` naming the file and line, never a traceback); files are read with bounds (a
ledger, a line, ``meta.json``), and only regular files are read at all.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from detaudit.errors import InputError
from detaudit.trace.run_trace import (
    Chain,
    Draw,
    ModuleCall,
    OpCall,
    ProcessTrace,
    RunTrace,
    Spawn,
    explain_ends,
)

MAX_LEDGER_BYTES = 1 << 30   # a ledger keeps `keep` records per site, then hash chains: far below
MAX_LINE_BYTES = 1 << 20
MAX_NOTE_BYTES = 64 << 10    # error.<pid>.txt: what the tracer could not do


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
