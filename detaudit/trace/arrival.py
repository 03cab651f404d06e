"""Arrival order (inside every traced process): at each call site of the program that takes
results as they complete, the order in which they arrived.

Watched: ``ray.wait``; ``concurrent.futures.as_completed`` and ``wait`` (``FIRST_COMPLETED``,
``FIRST_EXCEPTION``); ``asyncio.as_completed`` and ``asyncio.wait`` (likewise); and the
consumers of FIFO queues (``queue.Queue.get``, ``asyncio.Queue.get``). A call made inside
library code (no frame of the program on the stack) is not watched.

A *gather* is what one call of the function at the site took there: every ``ray.wait`` of
``while pending: ready, pending = ray.wait(pending)`` in one call of ``generate`` is one gather.
Its results are numbered in the order the program handed them over (the list ``ray.wait`` was
given; a set of futures by the order they were submitted, a set of asyncio tasks by the order
they were made); an item a queue hands over is named by who put it (the pool task, asyncio
task or thread, and its count of puts). The record of a gather (``{"type": "arrival"}``) holds
that order, one group per call that returned (results a call returned together form one
group), the API, the site and the call that gathered it (``generate(rollout=1)``: the batch it
fed). After ``keep`` gathers at a site, later ones are folded into the site's hash chain.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from detaudit.trace.frames import Invocations, frame_call_text
from detaudit.trace.imports import PostImportFinder
from detaudit.trace.recorder import Recorder

_TAGS = itertools.count(1)          # futures submitted to a pool, in this process
_PRODUCER = threading.local()       # the pool task a thread runs now: who puts into a queue


@dataclass
class Gather:
    api: str
    site: str
    number: int                     # gathers at this site so far, this one included
    caller: str                     # the call that gathers (its plain arguments): the batch it fed
    invocation: tuple[Any, int]     # (code, call number) of the function at the site
    positions: dict[Any, str] = field(default_factory=dict)
    remaining: set[Any] = field(default_factory=set)
    order: list[list[str]] = field(default_factory=list)
    stable: bool = True             # False: a set of results no order can be put on


class Arrivals:
    """The open gather of each site of this process, written when it is complete, when the
    function at its site is called again, or when the ledger ends."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.lock = threading.RLock()
        self.open: dict[str, Gather] = {}
        self.counts: dict[str, int] = {}
        self.invocations = Invocations()
        self.producers: dict[str, int] = {}

    def _site_frame(self) -> FrameType | None:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and self.rec.sites.is_library(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def enter(self, api: str, items: list[Any], stable: bool = True) -> Gather | None:
        """A call at the program's site that waits for ``items`` (keys in the program's order)."""
        frame = self._site_frame()
        if frame is None:
            return None
        with self.lock:
            site = self.rec.sites.where(frame)
            invocation = (frame.f_code, self.invocations.number(frame))
            gather = self.open.get(site)
            if gather is not None and gather.invocation != invocation:
                self._close(gather, complete=False)
                gather = None
            if gather is None:
                number = self.counts[site] = self.counts.get(site, 0) + 1
                function = site.rpartition(" ")[2]
                gather = self.open[site] = Gather(api, site, number, frame_call_text(frame, function), invocation)
            gather.stable = gather.stable and stable
            for key in items:
                if key not in gather.positions:
                    gather.positions[key] = str(len(gather.positions))
                    gather.remaining.add(key)
            return gather

    def arrived(self, gather: Gather | None, keys: Iterable[Any], *, named: bool = False,
                closes: bool = True) -> None:
        """``keys`` came back from one call (``named``: they name themselves: queue items)."""
        if gather is None:
            return
        with self.lock:
            group = sorted((k if named else gather.positions[k]) for k in keys if named or k in gather.positions)
            if not group:
                return
            gather.order.append(group)
            gather.remaining.difference_update(keys)
            if closes and not gather.remaining and self.open.get(gather.site) is gather:
                self._close(gather, complete=True)

    def _close(self, gather: Gather, complete: bool) -> None:
        self.open.pop(gather.site, None)
        if not gather.order:
            return
        fields = {"api": gather.api, "site": gather.site, "n": gather.number, "order": gather.order,
                  "caller": gather.caller, "items": len(gather.positions) or sum(map(len, gather.order)),
                  "complete": complete, "stable": gather.stable}
        self.rec.record("arrival", fields, site=gather.site, item=json.dumps(gather.order, separators=(",", ":")))

    def flush(self) -> None:
        """The ledger ends (at exit; after each Ray task): write the gathers still open."""
        with self.lock:
            for gather in list(self.open.values()):
                self._close(gather, complete=not gather.remaining)

    def producer(self) -> str:
        """Who puts an item into a queue now, the same in every run: the pool task it runs, or
        its asyncio task, or its thread; with its count of puts."""
        who = getattr(_PRODUCER, "task", None)
        if who is None:
            asyncio = sys.modules.get("asyncio")
            task = None
            if asyncio is not None:
                try:
                    task = asyncio.current_task()
                except RuntimeError:  # no running loop in this thread
                    task = None
            who = task.get_name() if task is not None else threading.current_thread().name
        with self.lock:
            count = self.producers[who] = self.producers.get(who, 0) + 1
        return f"{who}#{count}"


def _tag(obj: Any) -> int | None:
    """The order a future was made in: its pool submit number, or an asyncio task's number."""
    tag = getattr(obj, "_detaudit_tag", None)
    if tag is not None:
        return int(tag)
    get_name = getattr(obj, "get_name", None)
    if get_name is not None:
        name = get_name()
        if isinstance(name, str) and name.startswith("Task-") and name[5:].isdigit():
            return int(name[5:])
    return None


def ordered(fs: Any) -> tuple[list[Any], bool]:
    """The futures of ``fs`` in the program's order, and whether that order is the same in
    every run (a set is put in the order its futures were made, when that is known)."""
    if isinstance(fs, (set, frozenset)):
        items = list(fs)
        tagged = [(_tag(f), f) for f in items]
        if all(tag is not None for tag, _ in tagged):
            return [f for _, f in sorted(tagged, key=lambda pair: pair[0] or 0)], True
        return items, False
    return list(fs), True


# --- the hooks -------------------------------------------------------------------------------------

def _marked(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__detaudit_arrival__ = True  # type: ignore[attr-defined]
    return fn


def _replace(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "__detaudit_arrival__", False):
        return
    setattr(owner, name, _marked(make(fn)))


def install_ray(arrivals: Arrivals, ray: Any) -> None:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wait(object_refs: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                refs = list(object_refs)
                gather = arrivals.enter("ray.wait", [r.hex() for r in refs])
            except Exception:  # noqa: BLE001 - not a list of refs: Ray says so itself
                return original(object_refs, *args, **kwargs)
            ready, not_ready = original(object_refs, *args, **kwargs)
            arrivals.arrived(gather, [r.hex() for r in ready])
            return ready, not_ready

        return wait

    _replace(ray, "wait", wrap)


def install_futures(arrivals: Arrivals, futures: Any) -> None:
    def as_completed(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(fs: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            items, stable = ordered(fs)
            gather = arrivals.enter("concurrent.futures.as_completed", [id(f) for f in items], stable)
            return _arrivals_of(arrivals, gather, original(items, *args, **kwargs))

        return traced

    def wait(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(fs: Any, timeout: Any = None, return_when: Any = futures.ALL_COMPLETED) -> Any:
            if return_when == futures.ALL_COMPLETED:
                return original(fs, timeout, return_when)
            items, stable = ordered(fs)
            gather = arrivals.enter("concurrent.futures.wait", [id(f) for f in items], stable)
            result = original(items, timeout, return_when)
            arrivals.arrived(gather, [id(f) for f in result[0]])
            return result

        return traced

    _replace(futures, "as_completed", as_completed)
    _replace(futures, "wait", wait)


def _arrivals_of(arrivals: Arrivals, gather: Gather | None, results: Iterator[Any]) -> Iterator[Any]:
    for future in results:
        arrivals.arrived(gather, [id(future)])
        yield future


def install_pools(arrivals: Arrivals, thread: Any) -> None:
    """Number the futures a thread pool makes, and name the task each worker runs."""
    def submit(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            tag = next(_TAGS)
            future = original(self, functools.partial(_as_task, f"pool task {tag}", fn), *args, **kwargs)
            future._detaudit_tag = tag
            return future

        return traced

    _replace(thread.ThreadPoolExecutor, "submit", submit)


def _as_task(name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    previous = getattr(_PRODUCER, "task", None)
    _PRODUCER.task = name
    try:
        return fn(*args, **kwargs)
    finally:
        _PRODUCER.task = previous


def install_process_pools(process: Any) -> None:
    def submit(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            future = original(self, fn, *args, **kwargs)
            future._detaudit_tag = next(_TAGS)
            return future

        return traced

    _replace(process.ProcessPoolExecutor, "submit", submit)


def install_asyncio(arrivals: Arrivals, asyncio: Any) -> None:
    tasks = asyncio.tasks

    def wait(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        async def traced(fs: Any, *args: Any, **kwargs: Any) -> Any:
            return_when = kwargs.get("return_when", args[1] if len(args) > 1 else tasks.ALL_COMPLETED)
            if return_when == tasks.ALL_COMPLETED:
                return await original(fs, *args, **kwargs)
            items, stable = ordered(fs)
            gather = arrivals.enter("asyncio.wait", [id(f) for f in items], stable)
            done, pending = await original(set(items), *args, **kwargs)
            arrivals.arrived(gather, [id(f) for f in done])
            return done, pending

        return traced

    def as_completed(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(fs: Any, *args: Any, **kwargs: Any) -> Any:
            items, stable = ordered(fs)
            futures = [tasks.ensure_future(f) for f in items]
            gather = arrivals.enter("asyncio.as_completed", [id(f) for f in futures], stable)
            for future in futures:  # done callbacks run in the order the futures complete
                future.add_done_callback(lambda f: arrivals.arrived(gather, [id(f)]))
            return original(futures, *args, **kwargs)

        return traced

    for owner in (tasks, asyncio):  # the package re-exports them: `asyncio.wait` is bound at its import
        _replace(owner, "wait", wait)
        _replace(owner, "as_completed", as_completed)


def install_queues(arrivals: Arrivals, queue_class: Any, get_name: str) -> None:
    """A FIFO queue keeps who put each item beside it, and its consumer records who it got.
    Queues that order items otherwise (LIFO, priority) override ``_put``/``_get``: not watched."""
    taken = threading.local()

    def put(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(self: Any, item: Any) -> None:
            original(self, item)
            self.__dict__.setdefault("_detaudit_producers", deque()).append(arrivals.producer())

        return traced

    def take(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(self: Any) -> Any:
            item = original(self)
            producers = self.__dict__.get("_detaudit_producers")
            taken.key = producers.popleft() if producers else None
            return item

        return traced

    def get(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            taken.key = None
            item = original(self, *args, **kwargs)
            key = taken.key
            if key is not None and type(self)._get is queue_class._get:
                gather = arrivals.enter(f"{queue_class.__module__}.Queue.{get_name}", [])
                arrivals.arrived(gather, [key], named=True, closes=False)
            return item

        return traced

    _replace(queue_class, "_put", put)
    _replace(queue_class, "_get", take)
    _replace(queue_class, get_name, get)


def install(rec: Recorder, finder: PostImportFinder) -> None:
    arrivals = Arrivals(rec)
    rec.flush_hooks.append(arrivals.flush)
    finder.when_imported("ray", lambda ray: install_ray(arrivals, ray))
    # the packages, not their submodules: `concurrent.futures.as_completed` is bound when the package is imported
    finder.when_imported("concurrent.futures", lambda futures: install_futures(arrivals, futures))
    finder.when_imported("concurrent.futures.thread", lambda thread: install_pools(arrivals, thread))
    finder.when_imported("concurrent.futures.process", install_process_pools)
    finder.when_imported("asyncio", lambda asyncio: install_asyncio(arrivals, asyncio))
    finder.when_imported("queue", lambda queue: install_queues(arrivals, queue.Queue, "get"))
    finder.when_imported("asyncio.queues", lambda queues: install_queues(arrivals, queues.Queue, "get_nowait"))
