"""Who this process is, for people and for matching processes across runs: main, Ray actor (by
class and name), Ray task, Ray worker, multiprocessing child, DataLoader worker or subprocess;
Ray's own daemons, which the tracer leaves out; and a command as a ledger keeps it (bounded)."""

from __future__ import annotations

import os
import sys
from typing import Any


def ray_identity() -> dict[str, Any] | None:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        worker = ray._private.worker.global_worker
        if getattr(worker, "mode", None) != 1:  # WORKER_MODE; the driver is 0
            return {"kind": "Ray worker", "label": "ray-worker", "final": False} if is_ray_worker() else None
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


def is_ray_worker() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0.endswith(os.path.join("ray", "_private", "workers", "default_worker.py"))


def is_ray_system() -> bool:
    """Ray's own daemons (log monitor, dashboard, ...): never part of a recipe's RNG story."""
    argv0 = sys.argv[0] if sys.argv else ""
    marker = os.sep + "ray" + os.sep
    return marker in argv0 and not is_ray_worker()


def identify(main_pid: int | None) -> dict[str, Any]:
    """kind (main, Ray actor, Ray task, Ray worker, multiprocessing child, DataLoader worker,
    subprocess), a label for people, and whether it can still change (a Ray worker becomes an
    actor or runs a task)."""
    ray_id = ray_identity()
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


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:80] or "process"


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
