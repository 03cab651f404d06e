"""Inside every process of a traced run: who this process is, where a draw was called from,
and the per-process JSONL file (``Recorder``) that the ledger and module hooks write to; the
post-import hook (``PostImportFinder``) that lets them patch torch and numpy only once the
program imports them.

One file per process, ``<trace dir>/<process>.<pid>.jsonl``. Lines:
``{"type": "process", ...}`` (who: kind, label, Ray actor class and name, pid; repeated when
a Ray worker becomes an actor), ``{"type": "seed", ...}`` (a generator seeded or its state
set, and where), ``{"type": "draw", ...}`` (the first ``keep`` draws of each call site),
``{"type": "chain", ...}`` (beyond those: a count and a hash chain, rewritten as the count
doubles and at exit), and ``{"type": "module", ...}`` / module chains in modules mode.
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
from typing import Any, Callable

from detaudit.trace import DIR_ENV

_RECORDER: "Recorder | None" = None


def recorder() -> "Recorder | None":
    """This process's recorder, or None when tracing is off."""
    return _RECORDER


def set_recorder(rec: "Recorder") -> None:
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
    roots.add(os.path.dirname(os.path.realpath(__file__)) + os.sep)  # the tracer itself
    return tuple(sorted(roots))


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

    def site(self, depth: int = 2) -> tuple[str, bool]:
        """(site, library): the first user frame; else the innermost library frame that is
        not the tracer, with ``library`` true."""
        frame = sys._getframe(depth)
        innermost = frame
        while frame is not None:
            filename = frame.f_code.co_filename
            if not self.is_library(filename):
                name = frame.f_code.co_name
                if name.startswith("<") and name != "<module>" and frame.f_back is not None \
                        and frame.f_back.f_code.co_filename == filename:
                    name = frame.f_back.f_code.co_name  # a comprehension: name its function
                return f"{self.short(filename)}:{frame.f_lineno} {name}", False
            frame = frame.f_back
        if innermost is None:
            return "?", True
        return f"{self.short(innermost.f_code.co_filename)}:{innermost.f_lineno} {innermost.f_code.co_name}", True


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

class Recorder:
    """Per-process state: sequence numbers, per-site counts and chains, and the file."""

    def __init__(self, trace_dir: str, mode: str, keep: int, main_pid: int | None) -> None:
        self.trace_dir = trace_dir
        self.mode = mode
        self.keep = keep
        self.main_pid = main_pid
        self.sites = CallSites()
        self.lock = threading.RLock()
        self.local = threading.local()
        self.started = time.time()
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.seq = 0
        self.counts: dict[tuple, int] = {}
        self.chains: dict[tuple, list] = {}  # key -> [count, chain hex, next flush count, extra]
        self.file: Any = None
        self.pending: list[str] = []
        self.identity: dict[str, Any] | None = None
        self.seeded: dict[str, dict[str, Any]] = getattr(self, "seeded", {})
        for info in self.seeded.values():
            info["inherited"] = True

    def after_fork(self) -> None:
        """A forked child inherits the parent's state and generators, never its file."""
        self._reset()

    # identity and output

    def _who(self) -> dict[str, Any]:
        if self.identity is None or not self.identity.get("final"):
            current = identify(self.main_pid)
            if current != self.identity:
                self.identity = current
                self._emit({"type": "process", "pid": self.pid, "argv0": sys.argv[0] if sys.argv else "",
                            **{k: v for k, v in current.items() if k != "final"}})
        return self.identity

    def _emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True)
        if self.file is None:
            who = self.identity or {"label": "process"}
            if not who.get("final") and not who.get("named") and len(self.pending) < 10_000:
                self.pending.append(line)
                return
            self._open(who)
        self.file.write(line + "\n")

    def _open(self, who: dict[str, Any]) -> None:
        os.makedirs(self.trace_dir, exist_ok=True)
        path = os.path.join(self.trace_dir, f"{_slug(who.get('label', 'process'))}.{self.pid}.jsonl")
        self.file = open(path, "a", buffering=1, encoding="utf-8")
        for line in self.pending:
            self.file.write(line + "\n")
        self.pending = []

    def flush(self) -> None:
        with self.lock:
            if os.getpid() != self.pid:
                return
            for key, state in self.chains.items():
                self._chain_line(key, state, final=True)
            if self.pending:
                self._open(self.identity or {"label": "process"})
            if self.file is not None:
                self.file.flush()

    # the records

    def in_call(self) -> bool:
        return getattr(self.local, "depth", 0) > 0

    def seed(self, generator: str, how: str) -> None:
        """A process-global generator was seeded (or had its state set) here."""
        if self.in_call():
            return
        site, library = self.sites.site(3)
        with self.lock:
            self._who()
            self.seq += 1
            info = {"site": site, "how": how, "seq": self.seq, "library": library}
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
                          "seeded": seeded["site"] if seeded else None, "t": round(time.time(), 3)}
                if seeded and seeded.get("inherited"):
                    record["seeded_inherited"] = True
                if who.get("task"):
                    record["task"] = who["task"]
                self._emit(record)
            else:
                self._extend(key, f"{op}|{fingerprint}")

    def module(self, name: str, cls: str, inputs: str, outputs: str) -> None:
        with self.lock:
            self._who()
            self.seq += 1
            key = ("module", name)
            count = self.counts.get(key, 0) + 1
            self.counts[key] = count
            if count <= self.keep:
                self._emit({"type": "module", "seq": self.seq, "name": name, "cls": cls, "n": count,
                            "in": inputs, "out": outputs, "t": round(time.time(), 3)})
            else:
                self._extend(key, f"{inputs}>{outputs}")

    def _extend(self, key: tuple, item: str) -> None:
        state = self.chains.get(key)
        if state is None:
            state = self.chains[key] = [0, "", 1, 0]
        state[0] += 1
        state[1] = hashlib.blake2b((state[1] + item).encode(), digest_size=8).hexdigest()
        if state[0] >= state[2]:
            state[2] *= 2
            self._chain_line(key, state)

    def _chain_line(self, key: tuple, state: list, final: bool = False) -> None:
        """Checkpoints at counts 1, 2, 4, ... (the same in every run) and a final one at exit:
        a process killed before its exit still leaves comparable checkpoints."""
        state[3] = state[0]
        extra = {"final": True} if final else {}
        if key[0] == "draw":
            self._emit({"type": "chain", "kind": "draw", "gen": key[1], "op": key[2], "site": key[3],
                        "after": self.keep, "count": state[0], "chain": state[1], **extra})
        else:
            self._emit({"type": "chain", "kind": "module", "name": key[1], "after": self.keep,
                        "count": state[0], "chain": state[1], **extra})


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
            spec.loader = _PostImportLoader(spec.loader, lambda module: [cb(module) for cb in callbacks])
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
