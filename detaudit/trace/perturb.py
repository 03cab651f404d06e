"""``--perturb-schedule``: inside every process of a run, delay the moment each piece of
concurrent work completes, by an amount detaudit draws, so that results gathered in completion
order arrive in another order than in the run before. A run's schedule number (``$DETAUDIT_PERTURB``)
is set by ``record`` (run k: k) and ``verify`` (2).

Two runs on a quiet machine usually complete their concurrent work in the same order, so code
that batches results as they complete (``ray.wait``, ``as_completed``, a queue) reproduces
until the load changes. Delayed here, after the work and before its result is handed over:
a Ray task or actor method (in the worker that runs it), a function submitted to a
``concurrent.futures`` thread or process pool, one given to a ``multiprocessing`` pool
(``apply_async``, ``imap_unordered``; thread pools too), and a coroutine of the program made
into an asyncio task. Ray's async actor methods and coroutines of library code are left as
they are.

The delay of one call is a fraction of a bound: the fraction a hash of the run's schedule number
and of the call (its function's qualified name and its plain arguments, ``frames.call_text``),
never a draw from the program's generators: it is the same for a call in every process and
every retry, and the program's random streams are untouched. Runs ``2k - 1`` and ``2k`` use
mirrored fractions (``f`` and ``1 - f``): two calls racing to one gather finish in opposite
orders in runs 1 and 2 whenever their delays differ by more than the machine's own jitter. The
bound scales with the work, so that it outweighs the jitter of work of any length: half the
call's own duration plus 0.25 s, at most ``MAX_DELAY_S``. What a run pays is the sum of the
delays on its critical path (``benchmarks/rl_trace_bench.py`` measures it).

Delays alone leave a race to the hash: two calls whose fractions happen to lie close together
finish in the same order in both runs. So ``ray.wait`` called by the program itself (not by a
library) is perturbed where it gathers too: once one result is ready it waits up to
``GATHER_WINDOW_S`` more for the rest of its list, then hands over those ready in an order the run
fixes (``arrival_order``): the program's order in run 1, the reverse in run 2, rotated by one more
position in each later pair. Every gather of two or more results that complete within the window
arrives in opposite orders in runs 1 and 2, whatever the hashes and the machine's jitter. A gather
whose results cannot complete before it hands one over (each waits on the last) costs the window
once and keeps its order.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from detaudit.trace import PERTURB_ENV
from detaudit.trace.frames import call_text
from detaudit.trace.imports import PostImportFinder

MAX_DELAY_S = 2.0      # the longest a result is held
BASE_DELAY_S = 0.25    # the bound of a call that takes no time
SHARE_OF_DURATION = 0.5
GATHER_WINDOW_S = 2 * MAX_DELAY_S  # how long a gather waits for the rest once a result is ready
_TRACER = os.path.dirname(os.path.realpath(__file__)) + os.sep
# frames between the program and the function it called: the tracer's wrappers, and the ones Ray
# puts around its public API (``ray.wait`` starts Ray first, or goes to a Ray Client)
_WRAPPERS = (os.path.join("ray", "_private", "auto_init_hook.py"), os.path.join("ray", "_private", "client_mode_hook.py"))


def schedule_number() -> int | None:
    """This run's schedule number (``$DETAUDIT_PERTURB``), or None when the run is not perturbed."""
    text = os.environ.get(PERTURB_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def fraction(run: int, call: str) -> float:
    """The share of its bound that ``call`` is held in run ``run``, in [0, 1) (see the module doc)."""
    pair = (run + 1) // 2
    digest = hashlib.blake2b(f"{pair}|{call}".encode(), digest_size=8).digest()
    share = int.from_bytes(digest, "big") / 2**64
    return share if run % 2 else 1.0 - share


def delay(run: int, call: str, duration: float) -> float:
    """Seconds to hold the result of ``call`` (which took ``duration`` seconds) in run ``run``."""
    return fraction(run, call) * min(MAX_DELAY_S, BASE_DELAY_S + SHARE_OF_DURATION * max(0.0, duration))


def arrival_order(run: int, count: int) -> list[int]:
    """The order in which run ``run`` hands over the ready results of a gather of ``count``
    (positions in the program's list): runs ``2k - 1`` and ``2k`` mirrored, each pair rotated
    by one position more than the pair before."""
    shift = ((run + 1) // 2 - 1) % max(count, 1)
    order = list(range(shift, count)) + list(range(shift))
    return order if run % 2 else order[::-1]


def _name(fn: Any) -> str:
    target = getattr(fn, "method", None) or fn  # a Ray actor method's executor names its method
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__


class Delayed:
    """``fn`` whose result is handed over ``delay(run, call)`` seconds after it is ready.
    A class at module level, so that a process pool can pickle it with its function."""

    def __init__(self, fn: Callable[..., Any], run: int) -> None:
        self.fn = fn
        self.run = run
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        result = self.fn(*args, **kwargs)
        hold(self.run, self.fn, args, kwargs, started)
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        return (Delayed, (self.fn, self.run))


def hold(run: int, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], started: float) -> None:
    """Wait ``delay`` for this call of ``fn``, started at ``started`` (``time.monotonic``); for a
    Ray actor method the actor, its first argument, counts by its type only."""
    time.sleep(delay(run, call_text(_name(fn), args, kwargs), time.monotonic() - started))


def _submit(run: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def submit(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            return original(self, Delayed(fn, run), *args, **kwargs)

        submit.__detaudit_perturbed__ = True  # type: ignore[attr-defined]
        return submit

    return wrap


def _pool_method(run: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def method(self: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return original(self, Delayed(func, run), *args, **kwargs)

        method.__detaudit_perturbed__ = True  # type: ignore[attr-defined]
        return method

    return wrap


def _replace(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "__detaudit_perturbed__", False):
        return
    setattr(owner, name, make(fn))


def install_asyncio(run: int, base_events: Any, is_library: Callable[[str], bool]) -> None:
    """Each coroutine of the program made into a task completes ``delay`` later."""
    base = base_events.BaseEventLoop

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def create_task(self: Any, coro: Any, *args: Any, **kwargs: Any) -> Any:
            code = getattr(coro, "cr_code", None)
            if code is not None and not is_library(code.co_filename):
                frame = coro.cr_frame
                local = frame.f_locals if frame is not None else {}
                names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
                call = call_text(code.co_qualname, (), {n: local[n] for n in names
                                                        if n not in ("self", "cls") and n in local})
                coro = _held(coro, run, call)
            return original(self, coro, *args, **kwargs)

        create_task.__detaudit_perturbed__ = True  # type: ignore[attr-defined]
        return create_task

    _replace(base, "create_task", wrap)


async def _held(coro: Any, run: int, call: str) -> Any:
    import asyncio

    started = time.monotonic()
    result = await coro
    await asyncio.sleep(delay(run, call, time.monotonic() - started))
    return result


def _called_by_program(is_library: Callable[[str], bool]) -> bool:
    """Whether the first caller outside the wrappers (``_WRAPPERS``, the tracer) is the program,
    not a library."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.endswith(_WRAPPERS)
                                 or os.path.realpath(frame.f_code.co_filename).startswith(_TRACER)):
        frame = frame.f_back
    return frame is not None and not is_library(frame.f_code.co_filename)


def install_ray_wait(run: int, worker: Any, is_library: Callable[[str], bool]) -> None:
    """``ray.wait`` (``ray._private.worker.wait``, before ``ray`` takes its name) hands over
    results in ``arrival_order`` (see the module doc)."""

    object_ref = getattr(worker, "ObjectRef", None)

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wait(ray_waitables: Any, *args: Any, **kwargs: Any) -> Any:
            # plain object refs only: a streaming generator's readiness is not its own identity
            if args or object_ref is None or not isinstance(ray_waitables, list) \
                    or not all(isinstance(w, object_ref) for w in ray_waitables) or not _called_by_program(is_library):
                return original(ray_waitables, *args, **kwargs)
            started = time.monotonic()
            as_ray_handed = original(ray_waitables, **kwargs)
            ready, _ = as_ray_handed
            timeout = kwargs.get("timeout")
            window = GATHER_WINDOW_S if timeout is None else min(GATHER_WINDOW_S, timeout - (time.monotonic() - started))
            if ready and len(ready) < len(ray_waitables) and window > 0:
                more = {**kwargs, "num_returns": len(ray_waitables), "timeout": window}
                ready, _ = original(ray_waitables, **more)
            ready_now = set(ready)
            chosen = [i for i in arrival_order(run, len(ray_waitables))
                      if ray_waitables[i] in ready_now][:kwargs.get("num_returns", 1)]
            if len(chosen) < len(as_ray_handed[0]):  # never hand over less than Ray did (the program would wait on)
                return as_ray_handed
            rest = sorted(set(range(len(ray_waitables))) - set(chosen))
            return [ray_waitables[i] for i in chosen], [ray_waitables[i] for i in rest]

        wait.__detaudit_perturbed__ = True  # type: ignore[attr-defined]
        return wait

    _replace(worker, "wait", wrap)


def install(run: int, finder: PostImportFinder, is_library: Callable[[str], bool]) -> None:
    """Delay completions in this process: pools now, asyncio and Ray when they are imported."""
    finder.when_imported("concurrent.futures.thread",
                         lambda module: _replace(module.ThreadPoolExecutor, "submit", _submit(run)))
    finder.when_imported("concurrent.futures.process",
                         lambda module: _replace(module.ProcessPoolExecutor, "submit", _submit(run)))
    def pools(module: Any) -> None:
        for name in ("apply_async", "imap_unordered"):
            _replace(module.Pool, name, _pool_method(run))

    finder.when_imported("multiprocessing.pool", pools)
    finder.when_imported("asyncio.base_events", lambda module: install_asyncio(run, module, is_library))
    # before ``ray`` binds ``ray.wait``: the tracer's ``arrival`` hook wraps this one and sees what the program got
    finder.when_imported("ray._private.worker", lambda module: install_ray_wait(run, module, is_library))
