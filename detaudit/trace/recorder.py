"""Inside every process of a traced run: the per-process JSONL file (``Recorder``) that the
ledger, module, arrival and seed hooks write to.

One file per process, ``<trace dir>/<process>.<pid>.jsonl``. Lines:
``{"type": "process", ...}`` (who: kind, label, Ray actor class and name, pid; repeated when
a Ray worker becomes an actor), ``{"type": "seed", ...}`` (a generator seeded or its state
set, and where), ``{"type": "draw", ...}`` (the first ``keep`` draws of each call site),
``{"type": "chain", ...}`` (beyond those: a count and a hash chain, rewritten as the count
doubles and at exit), ``{"type": "module", ...}`` / ``{"type": "op", ...}`` and their chains in
modules mode, ``{"type": "spawn", ...}`` (a process this one started, by pid) and
``{"type": "exec", ...}``; the kinds that other modules add through ``Recorder.record``
(``arrival``: ``arrival.py``, ``seed_value``: ``seeds.py``). The first line is
``{"type": "start", ...}`` (mode, card, kept records per site), the last ``{"type": "end", ...}``:
a ledger without it is incomplete.

Who the process is lives in ``identity.py``, where a call was made in ``sites.py``, the
post-import hook in ``imports.py``, notes beside the ledgers in ``notes.py``.
"""


from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from detaudit.trace.fingerprint import Pending, resolve
from detaudit.trace.identity import identify, short_argv, slug
from detaudit.trace.notes import note_failure
from detaudit.trace.sites import CallSites

_RECORDER: Recorder | None = None


def recorder() -> Recorder | None:
    """This process's recorder, or None when tracing is off."""
    return _RECORDER


def set_recorder(rec: Recorder) -> None:
    global _RECORDER
    _RECORDER = rec



FORK_RESEED = "os.fork (CPython reseeds random from the OS in the child)"
UNNAMED = "unnamed"    # a ledger's file name until its process knows who it is
TAIL_PREFIX = "tail"   # tail.<pid>.tail: the chains' latest counts, one fixed slot each (not a ledger)
TAIL_SLOT = 1024
DEFERRED_BATCH = 256   # module and op records waiting on a GPU, written together


class Recorder:
    """Per-process state: sequence numbers, per-site counts and chains, and the file.

    The file starts with a ``start`` record (pid, parent, mode, card, kept records per
    site) and ends with an ``end`` record written at exit (``atexit``, SIGTERM, ``os._exit``,
    before an ``exec``): a ledger without its end is incomplete, and the compare says so.
    """

    def __init__(self, trace_dir: str, mode: str, keep: int, main_pid: int | None, card: str | None = None) -> None:
        self.trace_dir = trace_dir
        self.mode = mode
        self.keep = keep
        self.main_pid = main_pid
        self.card = card
        self.sites = CallSites()
        self.local = threading.local()
        self.started = time.time()
        self.flush_hooks: list[Callable[[], None]] = []  # write what is still open (gathers, seed groups)
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.RLock()  # a fresh one in a fork child: the parent's may be held
        self.pid = os.getpid()
        self.seq = 0
        self.counts: dict[tuple, int] = {}
        # key -> [count, chain hex, next checkpoint count, count at the last line, count at the last end]
        self.chains: dict[tuple, list] = {}
        self.file: Any = None
        self.path = ""      # the ledger's file: provisional until the process knows who it is
        self.named = False  # the file carries the process's label
        self.tail: int | None = None          # fd of the chain-tail file (see _write_tail)
        self.tail_slots: dict[tuple, int] = {}
        self.identity: dict[str, Any] | None = None
        self.deferred: list[tuple[str, tuple, float]] = []  # module and op records waiting on a GPU
        self.writing_deferred = False
        self.started_children = False
        self._emit({"type": "start", "pid": self.pid, "ppid": os.getppid(), "mode": self.mode, "card": self.card,
                    "keep": self.keep, "argv": short_argv(sys.argv), "through": True, "t": round(time.time(), 3)})
        self.seeded: dict[str, dict[str, Any]] = getattr(self, "seeded", {})
        for info in self.seeded.values():
            info["inherited"] = True

    def after_fork(self) -> None:
        """A forked child inherits the parent's state and generators, never its file; CPython
        reseeds ``random`` in the child from the OS, so its draws are not the parent's seeding."""
        self._reset()
        if "random" in sys.modules:
            self.seq += 1
            self.seeded["random"] = {"site": FORK_RESEED, "how": FORK_RESEED, "seq": self.seq, "library": True,
                                     "entropy": True}
            self._emit({"type": "seed", "gen": "random", "site": FORK_RESEED, "how": FORK_RESEED, "seq": self.seq,
                        "library": True})

    # identity and output

    def _who(self) -> dict[str, Any]:
        if self.identity is None or not self.identity.get("final"):
            current = identify(self.main_pid)
            if current != self.identity:
                self.identity = current
                self._emit({"type": "process", "pid": self.pid, "argv0": sys.argv[0] if sys.argv else "",
                            **{k: v for k, v in current.items() if k != "final"}})
                if current.get("final") or current.get("named"):
                    self._name_ledger(current)
        return self.identity

    def _emit(self, record: dict[str, Any]) -> None:
        """Write one record through to the file (line-buffered) before the traced call goes on:
        a process killed at any point leaves every record it made (but the module and op
        records still waiting on a GPU, which go first)."""
        if self.deferred and not self.writing_deferred:
            self._write_deferred()
        line = json.dumps(record, separators=(",", ":"), sort_keys=True)
        if self.file is None:
            self._open()
        self.file.write(line + "\n")

    def _claim(self, stem: str, make: Callable[[str], None], ext: str = ".jsonl") -> str:
        """``stem[.N]<ext>`` made by ``make(path)`` (which fails if it exists): never another
        process's file (an exec keeps the pid)."""
        suffix = ""
        while True:
            path = stem + suffix + ext
            try:
                make(path)
                return path
            except FileExistsError:
                suffix = f".{int(suffix[1:] or 1) + 1}"

    def _open(self) -> None:
        """The ledger, under a provisional name until the process knows who it is (a fork child
        or a Ray worker learns it later): a process killed before then still leaves its ledger."""
        os.makedirs(self.trace_dir, exist_ok=True)

        def create(path: str) -> None:
            self.file = open(path, "x", buffering=1, encoding="utf-8")

        self.path = self._claim(os.path.join(self.trace_dir, f"{UNNAMED}.{self.pid}"), create)

    def _name_ledger(self, who: dict[str, Any]) -> None:
        """Rename the ledger after the process's label, once (a link, then the old name goes)."""
        if self.named or self.file is None:
            return
        old = self.path
        try:
            self.path = self._claim(os.path.join(self.trace_dir, f"{slug(who.get('label', 'process'))}.{self.pid}"),
                                    lambda path: os.link(old, path))
            os.unlink(old)
        except OSError:
            self.path = old  # keeps its provisional name: the records inside say who wrote it
        self.named = True

    def flush(self) -> None:
        """Write every chain's final count and the ``end`` record: the ledger is complete."""
        with self.lock:
            if os.getpid() != self.pid:
                return
            try:
                self._who()  # a silent process still says who it was
            except Exception:  # noqa: BLE001 - at exit (Ray half shut down): the ledger still ends
                pass
            self._write_deferred()
            for hook in self.flush_hooks:
                try:
                    hook()
                except Exception as exc:  # noqa: BLE001 - the ledger still ends; the trace reads as incomplete
                    note_failure(f"could not write its last records: {exc!r}")
            for key, state in self.chains.items():
                if state[4] != state[0]:  # its count at this end is not written yet
                    self._chain_line(key, state, final=True)
            main = (self.identity or {}).get("kind") == "main"
            if main or self.started_children:
                try:
                    left = left_running(self.pid, session=main)
                except Exception:  # noqa: BLE001 - an odd /proc: the ledger still ends (and says nothing)
                    left = []
                if left or main:
                    self._emit({"type": "left", "pids": left})
            self._emit({"type": "end", "pid": self.pid, "seq": self.seq, "t": round(time.time(), 3)})
            self._name_ledger(self.identity or {"label": "process"})
            self.file.flush()

    # the records

    def in_call(self) -> bool:
        return getattr(self.local, "depth", 0) > 0

    def seed(self, generator: str, how: str, entropy: bool = False) -> None:
        """A process-global generator was seeded (or had its state set) here; ``entropy``: with
        a seed from the OS (``random.seed()``, ``torch.seed()``): not reproducible."""
        if self.in_call():
            return
        site, library = self.sites.site(3)
        with self.lock:
            self._who()
            self.seq += 1
            info = {"site": site, "how": how, "seq": self.seq, "library": library}
            if entropy:
                info["entropy"] = True
            self.seeded[generator] = info
            self._emit({"type": "seed", "gen": generator, **info})

    def draw(self, generator: str, op: str, state: Callable[[], str]) -> None:
        """One draw from a process-global generator; ``state`` fingerprints it before the draw."""
        site, library = self.sites.site(3)
        with self.lock:
            who = self._who()
            self.seq += 1
            key = ("draw", generator, op, site)
            count = self.counts.get(key, 0) + 1
            self.counts[key] = count
            fingerprint = state()
            if count <= self.keep:
                seeded = self.seeded.get(generator) or self.seeded.get(generator.partition(":")[0])
                record = {"type": "draw", "seq": self.seq, "gen": generator, "op": op, "site": site,
                          "library": library, "n": count, "state": fingerprint,
                          "seeded": seeded["site"] if seeded and not seeded.get("entropy") else None,
                          "t": round(time.time(), 3)}
                if seeded and seeded.get("entropy"):
                    record["entropy"] = f"{seeded['how']} at {seeded['site']}" if seeded["site"] != seeded["how"] \
                        else seeded["how"]
                if seeded and seeded.get("inherited"):
                    record["seeded_inherited"] = True
                if who.get("task"):
                    record["task"] = who["task"]
                self._emit(record)
            else:
                self._extend(key, f"{op}|{fingerprint}")

    def module(self, name: str, cls: str, inputs: str | Pending, outputs: str | Pending,
               capture: Callable[[int, int], None] | None = None) -> None:
        """A module call's fingerprints; pending ones (digests still on a GPU) are written with the
        batch they resolve in (see ``_defer``). ``capture(seq, n)``, for a kept call only, keeps its
        outputs (``--parity``: ``parity_capture.py``)."""
        if not isinstance(inputs, str) or not isinstance(outputs, str):
            self._defer("module", (name, cls, inputs, outputs, capture))
            return
        self._module(name, cls, inputs, outputs, round(time.time(), 3), capture)

    def _module(self, name: str, cls: str, inputs: str, outputs: str, t: float,
                capture: Callable[[int, int], None] | None = None) -> None:
        with self.lock:
            self._who()
            self.seq += 1
            key = ("module", name)
            count = self.counts.get(key, 0) + 1
            self.counts[key] = count
            if count <= self.keep:
                self._emit({"type": "module", "seq": self.seq, "name": name, "cls": cls, "n": count,
                            "in": inputs, "out": outputs, "t": t})
                if capture is not None:
                    capture(self.seq, count)
            else:
                self._extend(key, f"{inputs}>{outputs}")

    def record(self, kind: str, fields: dict[str, Any], site: str | None = None, item: str = "") -> None:
        """A record of a kind another module defines (``arrival``, ``seed_value``). With ``site``,
        the first ``keep`` of that kind at that site are written whole and later ones only
        folded (``item``) into the site's hash chain, as draws are."""
        with self.lock:
            self._who()
            self.seq += 1
            if site is not None:
                key = (kind, site)
                count = self.counts.get(key, 0) + 1
                self.counts[key] = count
                if count > self.keep:
                    self._extend(key, item)
                    return
            self._emit({"type": kind, "seq": self.seq, **fields, "t": round(time.time(), 3)})

    def op(self, name: str, at: str, site: str, inputs: str | Pending, outputs: str | Pending) -> None:
        """A torch op called outside any module: its name, where (``at``: the innermost frame
        outside torch; ``site``: the first frame outside the libraries) and its fingerprints."""
        if not isinstance(inputs, str) or not isinstance(outputs, str):
            self._defer("op", (name, at, site, inputs, outputs))
            return
        self._op(name, at, site, inputs, outputs, round(time.time(), 3))

    def _op(self, name: str, at: str, site: str, inputs: str, outputs: str, t: float) -> None:
        with self.lock:
            self._who()
            self.seq += 1
            key = ("op", name, at)
            count = self.counts.get(key, 0) + 1
            self.counts[key] = count
            if count <= self.keep:
                self._emit({"type": "op", "seq": self.seq, "name": name, "at": at, "site": site, "n": count,
                            "in": inputs, "out": outputs, "t": t})
            else:
                self._extend(key, f"{inputs}>{outputs}")

    def _defer(self, kind: str, args: tuple) -> None:
        """Queue a record whose fingerprints wait on the GPU. The queue is written, in order,
        before any other record and every ``DEFERRED_BATCH`` records (one device-to-host copy for
        the batch, not one synchronisation per call): where the batches fall depends on the
        calls alone, so two runs write the same ledger."""
        with self.lock:
            self.deferred.append((kind, args, round(time.time(), 3)))
            if len(self.deferred) >= DEFERRED_BATCH:
                self._write_deferred()

    def _write_deferred(self) -> None:
        if not self.deferred or self.writing_deferred:
            return
        items, self.deferred = self.deferred, []
        self.writing_deferred = True
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1  # the copy's own torch ops are not the program's
        try:
            resolve([a for _, args, _ in items for a in args if isinstance(a, Pending)])
        finally:
            self.local.depth = depth
        try:
            for kind, args, t in items:
                if kind == "module":
                    name, cls, inputs, outputs, capture = args
                    self._module(name, cls, str(inputs), str(outputs), t, capture)
                else:
                    name, at, site, inputs, outputs = args
                    self._op(name, at, site, str(inputs), str(outputs), t)
        finally:
            self.writing_deferred = False

    def spawn(self, pid: int, argv: Any, via: str, python: bool) -> None:
        """This process started process ``pid``: a Python one must leave a ledger of its own."""
        self.started_children = True
        with self.lock:
            self._who()
            self.seq += 1
            self._emit({"type": "spawn", "seq": self.seq, "child": int(pid), "argv": short_argv(argv), "via": via,
                        "python": bool(python)})

    def signal(self, target: int, signum: int, fatal_to_self: bool) -> None:
        """This process sends signal ``signum`` to process ``target`` (a pool ending its workers);
        ``fatal_to_self``: the signal ends this process now, so its ledger ends first."""
        with self.lock:
            self._who()
            self.seq += 1
            self._emit({"type": "signal", "seq": self.seq, "target": int(target), "signal": int(signum)})
            if fatal_to_self:
                self.flush()

    def exec_program(self, argv: Any, python: bool) -> None:
        """This process is about to replace itself: end its ledger (the new program, if it is
        Python, writes its own, under the same pid)."""
        with self.lock:
            self._who()
            self.seq += 1
            self._emit({"type": "exec", "seq": self.seq, "argv": short_argv(argv), "python": bool(python)})
            self.flush()

    def exec_failed(self) -> None:
        with self.lock:
            self.seq += 1
            self._emit({"type": "exec_failed", "seq": self.seq})

    def _extend(self, key: tuple, item: str) -> None:
        state = self.chains.get(key)
        if state is None:
            state = self.chains[key] = [0, "", 1, 0, -1]
        state[0] += 1
        state[1] = hashlib.blake2b((state[1] + item).encode(), digest_size=8).hexdigest()
        if state[0] >= state[2]:
            state[2] *= 2
            self._chain_line(key, state)
        else:
            self._write_tail(key, state)

    def _write_tail(self, key: tuple, state: list) -> None:
        """The chain's count and hash now, in its fixed slot of this ledger's tail file
        (overwritten in place, one ``pwrite``): with the checkpoint lines, every call beyond
        the kept ones is on disk when it returns, so a killed process's chains are complete
        up to the kill without a ledger line per call."""
        line = json.dumps(self._chain_record(key, state), separators=(",", ":"), sort_keys=True).encode()
        if len(line) >= TAIL_SLOT:  # a very long call site: a ledger line instead
            self._chain_line(key, state)
            return
        if self.tail is None:
            os.makedirs(self.trace_dir, exist_ok=True)

            def create(path: str) -> None:
                self.tail = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)

            path = self._claim(os.path.join(self.trace_dir, f"{TAIL_PREFIX}.{self.pid}"), create, ".tail")
            self._emit({"type": "tail", "file": os.path.basename(path), "slot": TAIL_SLOT})
        assert self.tail is not None
        slot = self.tail_slots.setdefault(key, len(self.tail_slots))
        os.pwrite(self.tail, line.ljust(TAIL_SLOT - 1) + b"\n", slot * TAIL_SLOT)

    def _chain_line(self, key: tuple, state: list, final: bool = False) -> None:
        """Checkpoints at counts 1, 2, 4, ... (the same in every run) and a final one with each
        end (at exit; in a Ray worker after each task): a process killed before its exit still
        leaves comparable checkpoints."""
        state[3] = state[0]
        if final:
            state[4] = state[0]
        record = self._chain_record(key, state)
        if final:
            record["final"] = True
        self._emit(record)

    def _chain_record(self, key: tuple, state: list) -> dict[str, Any]:
        if key[0] == "draw":
            return {"type": "chain", "kind": "draw", "gen": key[1], "op": key[2], "site": key[3],
                    "after": self.keep, "count": state[0], "chain": state[1]}
        if key[0] == "op":
            return {"type": "chain", "kind": "op", "name": key[1], "at": key[2], "after": self.keep,
                    "count": state[0], "chain": state[1]}
        if key[0] == "module":
            return {"type": "chain", "kind": "module", "name": key[1], "after": self.keep,
                    "count": state[0], "chain": state[1]}
        return {"type": "chain", "kind": key[0], "site": key[1], "after": self.keep,  # a kind written through record()
                "count": state[0], "chain": state[1]}


def left_running(own: int, session: bool) -> list[int]:
    """What this process leaves running as it closes its ledger (Linux ``/proc``; else nothing):
    with ``session``, every other live process of its session (the main process: what the run's
    clean-up, its group kill, then ends); else its live descendants (a Ray actor's compile-worker
    pool, which Ray ends with it)."""
    try:
        sid = str(os.getsid(0))
        names = os.listdir("/proc")
    except OSError:
        return []
    parents: dict[int, int] = {}
    in_session: list[int] = []
    for name in names:
        if not name.isdigit() or int(name) == own:
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        except (OSError, IndexError):
            continue
        if len(fields) < 4 or fields[0] == "Z":
            continue
        parents[int(name)] = int(fields[1])
        if fields[3] == sid:
            in_session.append(int(name))
    if session:
        return sorted(in_session)
    mine = {own}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine and pid not in mine}
        mine |= found
        grew = bool(found)
    return sorted(mine - {own})
