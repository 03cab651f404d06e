"""``install()``: called by a traced run's ``sitecustomize`` in every Python process. It starts
this process's ``Recorder``, patches Python's ``random`` at once, and torch / numpy when (and only
if) the program imports them; nothing heavy is imported here.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from detaudit.trace import DEFAULT_KEEP, DIR_ENV, KEEP_ENV, MAIN_ENV, MODE_ENV
from detaudit.trace import recorder as _state  # the module: its current recorder, not a copy
from detaudit.trace.recorder import PostImportFinder, Recorder, _is_ray_system, _note_failure

_INSTALL_LOCK = threading.Lock()


def recorder() -> Recorder | None:
    """This process's recorder, or None when tracing is off."""
    return _state.recorder()


def install() -> Recorder | None:
    """Start tracing this process as ``$DETAUDIT_TRACE`` says; idempotent; None when off."""
    mode = os.environ.get(MODE_ENV, "")
    trace_dir = os.environ.get(DIR_ENV, "")
    if not mode or not trace_dir or _is_ray_system():
        return None
    with _INSTALL_LOCK:
        if _state.recorder() is not None:
            return _state.recorder()
        main = os.environ.get(MAIN_ENV) or None
        if main is None:
            os.environ[MAIN_ENV] = str(os.getpid())  # children inherit it: they are not "main"
            try:
                os.makedirs(trace_dir, exist_ok=True)  # the dir says: tracing started in this run
            except OSError as exc:
                _note_failure(f"cannot create the trace dir: {exc}")
        keep = int(os.environ.get(KEEP_ENV, DEFAULT_KEEP))
        rec = Recorder(trace_dir, mode, keep, int(main) if main else os.getpid())
        _state.set_recorder(rec)
        os.register_at_fork(after_in_child=rec.after_fork)
        atexit.register(rec.flush)
        finder = PostImportFinder()
        sys.meta_path.insert(0, finder)
        from detaudit.trace import ledger

        ledger.install(rec, finder)
        if mode == "modules":
            from detaudit.trace import modules

            finder.when_imported("torch", lambda torch: modules.install(rec, torch))
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
