"""Ray workers end their ledger after every task: Ray stops them at shutdown without running
``atexit`` (the raylet kills them), so an end written only at exit would never come, and every
Ray recipe's trace would read as incomplete. A worker between tasks does nothing, so the ledger
as of its last task is complete; a worker killed inside a task has no end after that task's
records, and the compare says so.

Hooked: ``FunctionActorManager.get_execution_info`` (what the worker runs for a task or an actor
method): the function it returns is wrapped to enter the op tracer in the task's thread
(``ops.enter_this_thread``), to hold its result back under ``--perturb-schedule``
(``perturb.hold``), and to call ``Recorder.flush`` when it returns or raises.
Async and generator functions (async actors, streaming tasks) are left as they are: their
ledgers end at exit only, and their completions are not delayed.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

from detaudit.trace.ops import enter_this_thread
from detaudit.trace.perturb import hold
from detaudit.trace.recorder import Recorder


def _plain(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` (or the actor method it runs) returns when its work is done."""
    target = getattr(fn, "method", fn)
    return not (inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)
                or inspect.isgeneratorfunction(target))


def install(rec: Recorder | None, function_manager: Any, run: int | None = None) -> None:
    """Wrap what this worker runs: ``rec`` (tracing on) ends its ledger after each call, ``run``
    (``--perturb-schedule``) holds each result back."""
    manager = function_manager.FunctionActorManager
    original = manager.get_execution_info
    if getattr(original, "__detaudit_traced__", False):
        return
    wrapped: dict[int, tuple[Callable[..., Any], Callable[..., Any]]] = {}

    def ending(fn: Callable[..., Any]) -> Callable[..., Any]:
        known = wrapped.get(id(fn))
        if known is not None and known[0] is fn:
            return known[1]

        @functools.wraps(fn)
        def task(*args: Any, **kwargs: Any) -> Any:
            enter_this_thread()  # --trace modules: this thread's torch ops, whichever thread imported torch
            started = time.monotonic()
            try:
                result = fn(*args, **kwargs)
                if run is not None:
                    hold(run, fn, args, kwargs, started)
                return result
            finally:
                if rec is not None:
                    rec.flush()

        for name in ("name", "method"):  # what Ray's executor reads off an actor method executor
            if hasattr(fn, name):
                setattr(task, name, getattr(fn, name))
        wrapped[id(fn)] = (fn, task)
        return task

    @functools.wraps(original)
    def get_execution_info(self: Any, *args: Any, **kwargs: Any) -> Any:
        info = original(self, *args, **kwargs)
        try:
            if _plain(info.function):
                return info._replace(function=ending(info.function))
        except Exception:  # noqa: BLE001 - an unexpected shape: Ray runs its own, the ledger ends at exit
            pass
        return info

    get_execution_info.__detaudit_traced__ = True  # type: ignore[attr-defined]
    manager.get_execution_info = get_execution_info
