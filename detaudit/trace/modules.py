"""Module fingerprints (``--trace modules``): per ``nn.Module`` call, a fingerprint
(``fingerprint.py``) of its tensor inputs (args and kwargs) and of its outputs.

Global forward hooks (``torch.nn.modules.module.register_module_forward_hook``) see every
module of every model without touching the recipe. A module is named by its path in the
first root module it was called under (``SD3Transformer2DModel.transformer_blocks.0.attn``),
so names are the same in every run and on every machine. A block compiled in place
(``module.compile()``) is recorded at its boundary, its submodules not (``_trace_compiled_calls``).
Post-hooks fire innermost first,
which is the order compare.py walks to find the first module whose inputs match and whose
outputs differ. The hooks also count how deep this thread is in module calls, so that
``ops.py`` fingerprints only the torch ops called outside any module.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from detaudit.trace.fingerprint import fingerprinter
from detaudit.trace.parity_capture import capturer
from detaudit.trace.recorder import Recorder

_DEPTH = threading.local()


def module_depth() -> int:
    """How many module calls this thread is inside now."""
    return getattr(_DEPTH, "n", 0)


def install(rec: Recorder, torch: Any) -> None:
    from torch.nn.modules import module as module_mod

    names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
    fingerprint = fingerprinter(torch)
    capture = capturer(rec, torch)  # --parity: the outputs of the two processes it names
    compiling = torch.compiler.is_compiling

    def pre_hook(module: Any, args: Any) -> None:
        if compiling():  # inside a graph torch.compile traces: not a call of this run (see below)
            return
        _DEPTH.n = module_depth() + 1
        if module in names:
            return
        root = type(module).__name__
        for sub, child in module.named_modules():
            if child not in names:
                names[child] = f"{root}.{sub}" if sub else root

    def leave(module: Any, args: Any, *rest: Any) -> None:
        if compiling():
            return
        _DEPTH.n = max(0, module_depth() - 1)

    def post_hook(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if rec.in_call() or compiling():
            return
        name = names.get(module) or type(module).__name__
        try:
            rec.module(name, type(module).__name__, fingerprint(args, kwargs), fingerprint(output),
                       capture(output) if capture is not None else None)
        except Exception as exc:  # an exotic tensor: say so rather than guess
            rec.module(name, type(module).__name__, "?", f"unhashable: {type(exc).__name__}")

    module_mod.register_module_forward_pre_hook(pre_hook)
    module_mod.register_module_forward_hook(post_hook, with_kwargs=True)
    # always_call: a forward that raises still leaves the module (torch then calls it without kwargs)
    module_mod.register_module_forward_hook(leave, always_call=True)
    _trace_compiled_calls(module_mod.Module, pre_hook, post_hook, leave)


def _trace_compiled_calls(Module: Any, pre_hook: Any, post_hook: Any, leave: Any) -> None:
    """A module compiled in place (``module.compile()``: its whole ``_call_impl``, global hooks
    included, runs as compiled code) is recorded at its boundary, from the calling eager code:
    its inputs and outputs, as an eager module's. Its submodules run inside the compiled graph,
    where the hooks stand aside (``is_compiling``: dynamo folds them away, no graph break), so
    they are not recorded one by one; their bits show in the compiled module's outputs."""
    original = Module.__call__
    if getattr(original, "__detaudit_traced__", False):
        return

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._compiled_call_impl is None:
            return original(self, *args, **kwargs)
        pre_hook(self, args)
        try:
            output = original(self, *args, **kwargs)
        except BaseException:
            leave(self, args)
            raise
        post_hook(self, args, kwargs, output)
        leave(self, args, output)
        return output

    call.__detaudit_traced__ = True  # type: ignore[attr-defined]
    Module.__call__ = call
