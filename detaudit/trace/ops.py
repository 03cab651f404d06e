"""Torch ops between modules (``--trace modules``): a fingerprint of the inputs and outputs of
every torch function or tensor method called outside any ``nn.Module`` call, named by the op
and where it was called, so that a difference that arises between modules (image
preprocessing between a VAE and CLIP, a scheduler step) is named by op and call site instead
of "outside any module".

A ``TorchFunctionMode`` entered in the thread that imports torch, and in the thread of every Ray
task or actor method before it runs (torch keeps the mode stack per thread: ops of other threads
are not seen; which thread of a Ray worker imports torch varies from run to run, so entering it
there alone would trace an actor's ops in one run and not in the next) sees each op at the level the program
called it (``F.interpolate`` once, not its internals). Ops whose result holds no tensor
(``.item()``, ``.tolist()``, ``.size()``), attribute reads (``.T``, ``.grad``) and the
factories of uninitialised memory (``torch.empty``, ``new_empty``, ``resize_``: their bytes
differ from run to run by nature) are not recorded; neither are ops inside a wrapped RNG call (the ledger has those) or inside a module
(the module's record covers them).

Where: ``at`` is the innermost frame outside torch (``diffusers/image_processor.py:93
denormalize``), ``site`` the first frame outside the libraries (the recipe's line), paths
relative to their ``sys.path`` entry as for draws.

Cost: every such op's tensors are hashed, inputs and outputs (on a GPU: digested there, the
digests copied to the host in batches; ``fingerprint.py``); ``benchmarks/trace_bench.py`` prints
it. ``DETAUDIT_TRACE_OPS=0`` leaves ops out.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from detaudit.trace.fingerprint import fingerprinter, has_tensor
from detaudit.trace.modules import module_depth
from detaudit.trace.recorder import Recorder

_enter_here: list[Callable[[], None]] = []  # set by install: enter the mode in the calling thread


def enter_this_thread() -> None:
    """Trace this thread's ops too (a Ray task's thread, before the task runs); a no-op when ops
    are not traced or the thread already is."""
    for enter in _enter_here:
        enter()


def recorded(name: str) -> bool:
    """Whether an op's result is worth a fingerprint (see the module doc)."""
    last = name.rpartition(".")[2]
    return not (last in ("__get__", "__set__", "resize_") or "empty" in last)


def op_name(func: Any) -> str:
    """``torch.clamp``, ``Tensor.add_``, ``torch.nn.functional.interpolate``."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    owner, _, name = qualname.rpartition(".")
    if owner in ("TensorBase", "Tensor", "_TensorBase"):
        return f"Tensor.{name}"
    if owner == "_VariableFunctionsClass" or module in ("torch", None):
        return f"torch.{name}"
    if module == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    if module == "torch._C._linalg":
        return f"torch.linalg.{name}"
    if module == "torch._C._fft":
        return f"torch.fft.{name}"
    if module == "torch._C._special":
        return f"torch.special.{name}"
    return f"{module}.{qualname}"


def install(rec: Recorder, torch: Any) -> None:
    from torch.overrides import TorchFunctionMode

    fingerprint = fingerprinter(torch)
    compiling = torch.compiler.is_compiling  # inside a graph torch.compile traces: not an op of this run
    Tensor = torch.Tensor
    torch_root = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
    tracer_root = os.path.dirname(os.path.realpath(__file__)) + os.sep
    inside: dict[str, bool] = {}
    names: dict[Any, str] = {}

    def in_torch(filename: str) -> bool:
        known = inside.get(filename)
        if known is None:
            real = os.path.realpath(filename) if not filename.startswith("<") else filename
            known = inside[filename] = real.startswith((torch_root, tracer_root)) or filename.startswith("<frozen")
        return known

    def where() -> tuple[str, str]:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and in_torch(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return "?", "?"
        at = site = rec.sites.where(frame)
        caller: FrameType | None = frame
        while caller is not None and rec.sites.is_library(caller.f_code.co_filename):
            caller = caller.f_back
        if caller is not None and caller is not frame:
            site = rec.sites.where(caller)
        return at, site

    class OpFingerprints(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            if module_depth() or rec.in_call() or compiling() or not has_tensor(result, Tensor):
                return result
            name = names.get(func)
            if name is None:
                name = names[func] = op_name(func) if recorded(op_name(func)) else ""
            if not name:
                return result
            at, site = where()
            try:
                rec.op(name, at, site, fingerprint(args, kwargs), fingerprint(result))
            except Exception as exc:  # an exotic tensor: say so rather than guess
                rec.op(name, at, site, "?", f"unhashable: {type(exc).__name__}")
            return result

    entered = threading.local()

    def enter() -> None:
        if not getattr(entered, "yes", False):
            entered.yes = True
            OpFingerprints().__enter__()  # for the life of the thread

    _enter_here[:] = [enter]
    enter()
