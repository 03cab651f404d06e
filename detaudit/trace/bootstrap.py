"""``install()``: called by a traced run's ``sitecustomize`` in every Python process. It starts
this process's ``Recorder``, patches Python's ``random`` and the ways a process starts others
at once, and torch / numpy when (and only if) the program imports them; nothing heavy is
imported here.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from detaudit.trace import (
    CARD_ENV,
    DIR_ENV,
    KEEP_ENV,
    MAIN_ENV,
    MODE_ENV,
    MODES,
    OPS_ENV,
    parse_keep,
)
from detaudit.trace import (
    recorder as _state,  # the module: its current recorder, not a copy
)
from detaudit.trace.identity import is_ray_system, is_ray_worker
from detaudit.trace.imports import PostImportFinder
from detaudit.trace.notes import note_failure, write_skip
from detaudit.trace.recorder import Recorder

_INSTALL_LOCK = threading.Lock()
_INSTALLED = False  # this process's hooks are in


def recorder() -> Recorder | None:
    """This process's recorder, or None when tracing is off."""
    return _state.recorder()


def install() -> Recorder | None:
    """Start tracing this process as ``$DETAUDIT_TRACE`` says, and delaying its completions as
    ``$DETAUDIT_PERTURB`` says (``--perturb-schedule``); idempotent. Returns the recorder, None
    when tracing is off.

    What it cannot honour (a mode or ``DETAUDIT_TRACE_KEEP`` it does not know) it notes in the
    trace dir, so that the run's trace reads as incomplete, never as identical."""
    global _INSTALLED
    from detaudit.trace.perturb import schedule_number

    run = schedule_number()
    mode = os.environ.get(MODE_ENV, "")
    trace_dir = os.environ.get(DIR_ENV, "")
    tracing = bool(mode and trace_dir)
    if not tracing and run is None:
        return None
    if is_ray_system():
        if tracing:
            write_skip(trace_dir, "a Ray system process (not part of the recipe)")
        return None
    with _INSTALL_LOCK:
        if _INSTALLED:
            return _state.recorder()
        _INSTALLED = True
        finder = PostImportFinder()
        sys.meta_path.insert(0, finder)
        rec = _start_recorder(mode, trace_dir, finder) if tracing else None
        if run is not None:
            from detaudit.trace import perturb
            from detaudit.trace.sites import CallSites

            perturb.install(run, finder, (rec.sites if rec is not None else CallSites()).is_library)
        if is_ray_worker() and (rec is not None or run is not None):
            from detaudit.trace import ray_tasks

            finder.when_imported("ray._private.function_manager", lambda module: ray_tasks.install(rec, module, run))
        return rec


def _start_recorder(mode: str, trace_dir: str, finder: PostImportFinder) -> Recorder | None:
    main = os.environ.get(MAIN_ENV) or None
    if main is None:
        os.environ[MAIN_ENV] = str(os.getpid())  # children inherit it: they are not "main"
        try:
            os.makedirs(trace_dir, exist_ok=True)  # the dir says: tracing started in this run
        except OSError as exc:
            note_failure(f"cannot create the trace dir: {exc}")
    if mode not in MODES:
        note_failure(f"{MODE_ENV}={mode!r} is not a trace mode (one of {', '.join(MODES)}): not traced")
        return None
    try:
        keep = parse_keep(os.environ.get(KEEP_ENV))
    except ValueError as exc:
        note_failure(f"{exc}: not traced")
        return None
    rec = Recorder(trace_dir, mode, keep, int(main) if main and main.isdigit() else os.getpid(),
                   os.environ.get(CARD_ENV) or None)
    _state.set_recorder(rec)
    os.register_at_fork(after_in_child=rec.after_fork)
    atexit.register(rec.flush)
    from detaudit.trace import arrival, children, ledger, seeds

    ledger.install(rec, finder)
    children.install(rec, finder)
    arrival.install(rec, finder)
    seeds.install(rec, finder)
    if mode == "modules":
        from detaudit.trace import modules

        finder.when_imported("torch", lambda torch: modules.install(rec, torch))
        if os.environ.get(OPS_ENV, "1") != "0":
            from detaudit.trace import ops

            finder.when_imported("torch", lambda torch: ops.install(rec, torch))
    _flush_on_signal(rec)
    return rec


def _flush_on_signal(rec: Recorder) -> None:
    """Ray stops its workers with SIGTERM: write the chains before the default action."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return  # the program handles SIGTERM itself (and usually exits through atexit)

    def handler(signum: int, frame: Any) -> None:
        rec.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
