"""The processes a traced process starts, recorded by pid in its ledger, so that a Python child
the tracer could not enter (``python -I``, ``-E``, ``-S``, an environment without the trace
variables) is still known to exist and the compare can say it was not traced.

Hooked: ``os.fork`` (``multiprocessing``'s fork start, ``os.spawn*``), ``subprocess.Popen``
(``os.popen``, ``asyncio`` subprocesses), ``os.posix_spawn`` / ``posix_spawnp``,
``multiprocessing``'s spawn and forkserver starts (``multiprocessing.util.spawnv_passfds``) and
``os.execv`` / ``execve`` (every ``os.exec*`` ends there): the ledger ends before the process
image is replaced. ``os._exit`` first writes the ledger's end (``multiprocessing`` children and
DataLoader workers leave through it, past ``atexit``). ``os.kill`` records the signal and its
target (``Process.terminate``, ``Popen.kill``: a pool ending its workers), and a signal that
ends this very process at once (a watchdog's SIGKILL to itself) first writes the ledger's end. Not seen: a child started by C code
(``os.system``'s shell, a C extension's fork).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any

from detaudit.trace.imports import PostImportFinder
from detaudit.trace.recorder import Recorder

_PYTHON_NAME = re.compile(r"python[0-9.]*[a-z]?(\.exe)?$")


def is_python(program: Any) -> bool:
    """Whether ``program`` (a path or a name) is a Python interpreter."""
    try:
        path = os.fsdecode(program)
    except TypeError:
        return False
    if _PYTHON_NAME.match(os.path.basename(path)):
        return True
    try:
        real = os.path.realpath(path)
        return any(real == os.path.realpath(exe) for exe in (sys.executable, getattr(sys, "_base_executable", ""))
                   if exe)
    except (OSError, ValueError):
        return False


def _program(args: Any, executable: Any, shell: bool) -> Any:
    """The program a ``Popen`` runs (for ``shell=True``: the first word of the command)."""
    if isinstance(args, (str, bytes)):
        if shell:
            try:
                words = shlex.split(os.fsdecode(args))
            except ValueError:
                return None
            return words[0] if words else None
        return executable or args
    try:
        first = next(iter(args), None)
    except TypeError:
        first = args
    return first if shell or executable is None else executable


def _marked(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__detaudit_traced__ = True  # type: ignore[attr-defined]
    return fn


def _replace(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "__detaudit_traced__", False):
        return
    setattr(owner, name, _marked(functools.wraps(fn)(make(fn))))


def install(rec: Recorder, finder: PostImportFinder) -> None:
    """Hook ``os`` now, ``subprocess`` and ``multiprocessing.util`` when they are imported."""

    def fork(original: Callable[..., Any]) -> Callable[..., Any]:
        def traced_fork(*args: Any, **kwargs: Any) -> Any:
            pid = original(*args, **kwargs)
            if pid:
                rec.spawn(pid, sys.argv, "os.fork", True)
            return pid
        return traced_fork

    def posix_spawn(original: Callable[..., Any], via: str) -> Callable[..., Any]:
        def traced_spawn(path: Any, argv: Any, *args: Any, **kwargs: Any) -> Any:
            pid = original(path, argv, *args, **kwargs)
            rec.spawn(pid, argv, via, is_python(path))
            return pid
        return traced_spawn

    def execute(original: Callable[..., Any]) -> Callable[..., Any]:
        def traced_exec(path: Any, argv: Any, *args: Any) -> Any:
            rec.exec_program(argv, is_python(path))
            try:
                return original(path, argv, *args)
            except BaseException:
                rec.exec_failed()
                raise
        return traced_exec

    def exit_now(original: Callable[..., Any]) -> Callable[..., Any]:
        def traced_exit(*args: Any, **kwargs: Any) -> Any:
            try:
                rec.flush()
            finally:
                original(*args, **kwargs)
        return traced_exit

    def kill(original: Callable[..., Any]) -> Callable[..., Any]:
        def traced_kill(pid: int, signum: int) -> Any:
            if not signum:  # signal 0 only asks whether the process exists (Ray polls its daemons so)
                return original(pid, signum)
            try:
                to_self = pid in (0, os.getpid())
                rec.signal(os.getpid() if pid == 0 else pid, signum, to_self and _ends_process(signum))
            except Exception:  # noqa: BLE001 - the signal is sent whatever the tracer could write
                pass
            return original(pid, signum)
        return traced_kill

    _replace(os, "fork", fork)
    _replace(os, "kill", kill)
    for name in ("posix_spawn", "posix_spawnp"):
        _replace(os, name, functools.partial(posix_spawn, via=f"os.{name}"))
    for name in ("execv", "execve"):
        _replace(os, name, execute)
    _replace(os, "_exit", exit_now)
    finder.when_imported("subprocess", lambda module: _install_subprocess(rec, module))
    finder.when_imported("multiprocessing.util", lambda module: _install_multiprocessing(rec, module))


def _ends_process(signum: int) -> bool:
    """Whether ``signum`` sent to this process ends it at once: SIGKILL, or a
    terminating signal left to its default action (a Python handler runs, and flushes, itself)."""
    import signal

    if signum == signal.SIGKILL:
        return True
    try:
        return signum in _TERMINATING and signal.getsignal(signum) == signal.SIG_DFL
    except (ValueError, TypeError):
        return False


def _terminating() -> frozenset[int]:
    import signal

    names = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGABRT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGINT")
    return frozenset(int(getattr(signal, n)) for n in names if hasattr(signal, n))


_TERMINATING = _terminating()


def _install_subprocess(rec: Recorder, subprocess: Any) -> None:
    popen = subprocess.Popen
    if getattr(popen.__init__, "__detaudit_traced__", False):
        return
    original = popen.__init__

    @functools.wraps(original)
    def __init__(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        original(self, args, *rest, **kwargs)
        executable = kwargs.get("executable", rest[1] if len(rest) > 1 else None)
        shell = bool(kwargs.get("shell", rest[7] if len(rest) > 7 else False))
        pid = getattr(self, "pid", None)
        if pid:
            command = [args] if isinstance(args, (str, bytes)) else args
            rec.spawn(pid, command, "subprocess.Popen", is_python(_program(args, executable, shell)))

    popen.__init__ = _marked(__init__)


def _install_multiprocessing(rec: Recorder, util: Any) -> None:
    def spawnv_passfds(original: Callable[..., Any]) -> Callable[..., Any]:
        def traced(path: Any, args: Any, passfds: Any) -> Any:
            pid = original(path, args, passfds)
            rec.spawn(pid, args, "multiprocessing spawn", is_python(path))
            return pid
        return traced

    _replace(util, "spawnv_passfds", spawnv_passfds)
