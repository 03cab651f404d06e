"""Inside every process of a traced run: who this process is, where a draw was called from,
and the per-process JSONL file (``Recorder``) that the ledger and module hooks write to; the
post-import hook (``PostImportFinder``) that lets them patch torch and numpy only once the
program imports them.

One file per process, ``<trace dir>/<process>.<pid>.jsonl``. Lines:
``{"type": "process", ...}`` (who: kind, label, Ray actor class and name, pid; repeated when
a Ray worker becomes an actor), ``{"type": "seed", ...}`` (a generator seeded or its state
set, and where), ``{"type": "draw", ...}`` (the first ``keep`` draws of each call site),
``{"type": "chain", ...}`` (beyond those: a count and a hash chain, rewritten as the count
doubles and at exit), ``{"type": "module", ...}`` / ``{"type": "op", ...}`` and their chains in
modules mode, ``{"type": "spawn", ...}`` (a process this one started, by pid) and
``{"type": "exec", ...}``. The first line is ``{"type": "start", ...}`` (mode, card, kept
records per site), the last ``{"type": "end", ...}``: a ledger without it is incomplete.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from detaudit.trace import DIR_ENV
from detaudit.trace.fingerprint import Pending, resolve

_RECORDER: Recorder | None = None


def recorder() -> Recorder | None:
    """This process's recorder, or None when tracing is off."""
    return _RECORDER


def set_recorder(rec: Recorder) -> None:
    global _RECORDER
    _RECORDER = rec


# --- call sites ------------------------------------------------------------------------------

def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path) + os.sep)
    for path in sys.path:
        if path and os.path.basename(path.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            roots.add(os.path.realpath(path) + os.sep)
    for path in sys.path:
        real = os.path.realpath(path or os.curdir) + os.sep
        if not real.startswith(tuple(roots)):
            roots.update(_installed_into(real))
    roots.add(os.path.dirname(os.path.realpath(__file__)) + os.sep)  # the tracer itself
    return tuple(sorted(roots))


def _installed_into(folder: str) -> set[str]:
    """The packages and modules an installer put into a folder on ``sys.path`` other than
    site-packages (``pip install --target DIR``, then ``PYTHONPATH=DIR``): what each ``*.dist-info``
    there lists in its RECORD (an editable install's RECORD lists its path hook, not the code)."""
    out: set[str] = set()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".dist-info"):
            continue
        info = os.path.join(folder, name)
        try:
            with open(os.path.join(info, "RECORD"), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            head, slash, _ = line.split(",", 1)[0].partition("/")  # a package folder, or a module file
            if head and not head.startswith("..") and head != "__pycache__" \
                    and not head.endswith((".dist-info", ".data")):
                out.add(folder + head + (os.sep if slash else ""))
    return out


class CallSites:
    """``file:line function`` of the first frame outside the libraries (torch, numpy,
    random, the standard library, site-packages); paths relative to their ``sys.path`` entry
    so that the same code gives the same site on every machine."""

    def __init__(self) -> None:
        self.roots = _library_roots()
        self._is_lib: dict[str, bool] = {}
        self._short: dict[str, str] = {}

    def is_library(self, filename: str) -> bool:
        known = self._is_lib.get(filename)
        if known is None:
            if filename.startswith("<"):
                known = filename.startswith("<frozen")
            else:
                real = os.path.realpath(filename)
                known = real.startswith(self.roots)
            self._is_lib[filename] = known
        return known

    def short(self, filename: str) -> str:
        known = self._short.get(filename)
        if known is None:
            real = os.path.realpath(filename) if not filename.startswith("<") else filename
            best = ""
            for entry in sys.path:
                base = os.path.realpath(entry or os.curdir) + os.sep
                if real.startswith(base) and len(base) > len(best):
                    best = base
            known = real[len(best):] if best else real
            self._short[filename] = known
        return known

    def where(self, frame: FrameType) -> str:
        """``file:line function`` of a frame. A comprehension, lambda or generator expression is
        named by the function around it: Python 3.12 runs list, dict and set comprehensions in
        their function's own frame (PEP 709), 3.11 in a frame of their own, and one trace must
        name a line alike on both."""
        filename = frame.f_code.co_filename
        name = frame.f_code.co_name
        if name.startswith("<") and name != "<module>" and frame.f_back is not None \
                and frame.f_back.f_code.co_filename == filename:
            name = frame.f_back.f_code.co_name
        return f"{self.short(filename)}:{frame.f_lineno} {name}"

    def site(self, depth: int = 2) -> tuple[str, bool]:
        """(site, library): the first user frame; else the innermost library frame that is
        not the tracer, with ``library`` true."""
        frame: FrameType | None = sys._getframe(depth)
        innermost = frame
        while frame is not None:
            if not self.is_library(frame.f_code.co_filename):
                return self.where(frame), False
            frame = frame.f_back
        if innermost is None:
            return "?", True
        return self.where(innermost), True


# --- who this process is ----------------------------------------------------------------------

def _ray_identity() -> dict[str, Any] | None:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        worker = ray._private.worker.global_worker
        if getattr(worker, "mode", None) != 1:  # WORKER_MODE; the driver is 0
            return {"kind": "Ray worker", "label": "ray-worker", "final": False} if _is_ray_worker() else None
        ctx = ray.get_runtime_context()
        function = ctx.get_task_function_name() or ""
        actor = ctx.get_actor_id()
        if actor:
            parts = function.split(".")
            cls = parts[-2] if len(parts) >= 2 else (function or "actor")
            name = ctx.get_actor_name() or ""
            return {"kind": "Ray actor", "label": cls, "actor_class": cls, "actor_name": name, "final": True}
        if function:
            return {"kind": "Ray task", "label": function.split(".")[-1], "task": function, "final": False,
                    "named": True}
        return {"kind": "Ray worker", "label": "ray-worker", "final": False}
    except Exception:
        return {"kind": "Ray worker", "label": "ray-worker", "final": False}


def _is_ray_worker() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0.endswith(os.path.join("ray", "_private", "workers", "default_worker.py"))


def _is_ray_system() -> bool:
    """Ray's own daemons (log monitor, dashboard, ...): never part of a recipe's RNG story."""
    argv0 = sys.argv[0] if sys.argv else ""
    marker = os.sep + "ray" + os.sep
    return marker in argv0 and not _is_ray_worker()


def identify(main_pid: int | None) -> dict[str, Any]:
    """kind (main, Ray actor, Ray task, Ray worker, multiprocessing child, DataLoader worker,
    subprocess), a label for people, and whether it can still change (a Ray worker becomes an
    actor or runs a task)."""
    ray_id = _ray_identity()
    if ray_id is not None:
        return ray_id
    data = sys.modules.get("torch.utils.data")
    if data is not None:
        try:
            info = data.get_worker_info()
        except Exception:
            info = None
        if info is not None:
            return {"kind": "DataLoader worker", "label": f"DataLoader-worker-{info.id}", "final": True}
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            if mp.parent_process() is not None:
                target = getattr(mp.current_process(), "_target", None)
                if getattr(target, "__name__", "") == "_worker_loop" and \
                        getattr(target, "__module__", "") == "torch.utils.data._utils.worker":
                    # a DataLoader worker seeds its RNGs before it publishes its id: wait for it
                    return {"kind": "DataLoader worker", "label": "DataLoader-worker", "final": False}
                name = mp.current_process().name
                return {"kind": "multiprocessing child", "label": name, "final": True}
        except Exception:
            pass
    if main_pid is None or main_pid == os.getpid():
        return {"kind": "main", "label": "main", "final": True}
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return {"kind": "subprocess", "label": argv0 or "python", "final": True}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:80] or "process"


# --- the recorder -----------------------------------------------------------------------------

FORK_RESEED = "os.fork (CPython reseeds random from the OS in the child)"
UNNAMED = "unnamed"    # a ledger's file name until its process knows who it is
TAIL_PREFIX = "tail"   # tail.<pid>.tail: the chains' latest counts, one fixed slot each (not a ledger)
TAIL_SLOT = 1024
DEFERRED_BATCH = 256   # module and op records waiting on a GPU, written together
MAX_ARGV = 16       # arguments of a spawned command kept in the ledger
MAX_ARG_CHARS = 200


def short_argv(argv: Any) -> list[str]:
    """A command as the ledger keeps it: at most MAX_ARGV arguments of MAX_ARG_CHARS each."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    try:
        items = list(argv)
    except TypeError:
        items = [argv]
    out = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in items[:MAX_ARGV]]
    return [a if len(a) <= MAX_ARG_CHARS else a[:MAX_ARG_CHARS] + "..." for a in out]


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
            self.path = self._claim(os.path.join(self.trace_dir, f"{_slug(who.get('label', 'process'))}.{self.pid}"),
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

    def module(self, name: str, cls: str, inputs: str | Pending, outputs: str | Pending) -> None:
        """A module call's fingerprints; pending ones (digests still on a GPU) are written with the
        batch they resolve in (see ``_defer``)."""
        if not isinstance(inputs, str) or not isinstance(outputs, str):
            self._defer("module", (name, cls, inputs, outputs))
            return
        self._module(name, cls, inputs, outputs, round(time.time(), 3))

    def _module(self, name: str, cls: str, inputs: str, outputs: str, t: float) -> None:
        with self.lock:
            self._who()
            self.seq += 1
            key = ("module", name)
            count = self.counts.get(key, 0) + 1
            self.counts[key] = count
            if count <= self.keep:
                self._emit({"type": "module", "seq": self.seq, "name": name, "cls": cls, "n": count,
                            "in": inputs, "out": outputs, "t": t})
            else:
                self._extend(key, f"{inputs}>{outputs}")

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
                    name, cls, inputs, outputs = args
                    self._module(name, cls, str(inputs), str(outputs), t)
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
        return {"type": "chain", "kind": "module", "name": key[1], "after": self.keep,
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


def write_skip(trace_dir: str, why: str) -> None:
    """A process the tracer leaves out on purpose (Ray's own daemons) says so: its parent's
    record of it is then accounted for."""
    try:
        os.makedirs(trace_dir, exist_ok=True)
        record = {"type": "skip", "pid": os.getpid(), "why": why, "argv": short_argv(sys.argv)}
        with open(os.path.join(trace_dir, f"skipped.{os.getpid()}.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    except OSError:
        pass


# --- post-import hooks ---------------------------------------------------------------------------

class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callback: Callable[[Any], None]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            self.callback(module)
        except Exception as exc:  # the program must run on; the trace says it is incomplete
            _note_failure(f"after import of {module.__name__}: {exc!r}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``name`` is first imported."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[Any], None]]] = {}
        self.busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        callbacks = self.callbacks.get(fullname)
        if not callbacks or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self.busy.discard(fullname)
        if spec.loader is not None:
            def run_callbacks(module: Any) -> None:
                for callback in callbacks:
                    callback(module)
            spec.loader = _PostImportLoader(spec.loader, run_callbacks)
        return spec

    def when_imported(self, name: str, callback: Callable[[Any], None]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
        else:
            self.callbacks.setdefault(name, []).append(callback)


def _note_failure(message: str) -> None:
    """The trace of this process is incomplete: say so in the trace dir (compare fails closed)."""
    print(f"detaudit trace: pid {os.getpid()}: {message}", file=sys.stderr)
    trace_dir = os.environ.get(DIR_ENV)
    if trace_dir:
        try:
            os.makedirs(trace_dir, exist_ok=True)
            with open(os.path.join(trace_dir, f"error.{os.getpid()}.txt"), "a", encoding="utf-8") as fh:
                fh.write(message + "\n")
        except OSError:
            pass
