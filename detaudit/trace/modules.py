"""Module fingerprints (``--trace modules``): per ``nn.Module`` call, a hash of the bytes,
dtypes and shapes of its tensor inputs (args and kwargs) and of its outputs.

Global forward hooks (``torch.nn.modules.module.register_module_forward_hook``) see every
module of every model without touching the recipe. A module is named by its path in the
first root module it was called under (``SD3Transformer2DModel.transformer_blocks.0.attn``),
so names are the same in every run and on every machine. Post-hooks fire innermost first,
which is the order compare.py walks to find the first module whose inputs match and whose
outputs differ.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

from detaudit.trace.recorder import Recorder

MAX_DEPTH = 4  # nesting of tuples/lists/dicts searched for tensors


def install(rec: Recorder, torch: Any) -> None:
    from torch.nn.modules import module as module_mod

    names: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
    Tensor = torch.Tensor

    def tensor_bytes(t: Any) -> Any:
        t = t.detach()
        to_local = getattr(t, "to_local", None)  # DTensor (FSDP2): this rank's shard
        if to_local is not None:
            t = to_local()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.device.type == "meta":
            return b""
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        t = t.contiguous().reshape(-1)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        return t.view(torch.uint8).numpy()

    def fingerprint(*values: Any) -> str:
        digest = hashlib.blake2b(digest_size=8)
        stack = [(v, 0) for v in reversed(values)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, Tensor):
                digest.update(f"{value.dtype}{tuple(value.shape)};".encode())
                digest.update(tensor_bytes(value))
            elif depth < MAX_DEPTH:
                if isinstance(value, (tuple, list)):
                    stack.extend((v, depth + 1) for v in reversed(value))
                elif isinstance(value, dict):
                    for key in sorted(value, key=str, reverse=True):
                        stack.append((value[key], depth + 1))
                        stack.append((str(key), depth + 1))
                elif isinstance(value, str):
                    digest.update(value.encode() + b";")
        return digest.hexdigest()

    def pre_hook(module: Any, args: Any) -> None:
        if module in names:
            return
        root = type(module).__name__
        for sub, child in module.named_modules():
            if child not in names:
                names[child] = f"{root}.{sub}" if sub else root

    def post_hook(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if rec.in_call():
            return
        name = names.get(module) or type(module).__name__
        try:
            rec.module(name, type(module).__name__, fingerprint(args, kwargs), fingerprint(output))
        except Exception as exc:  # an exotic tensor: say so rather than guess
            rec.module(name, type(module).__name__, "?", f"unhashable: {type(exc).__name__}")

    module_mod.register_module_forward_pre_hook(pre_hook)
    module_mod.register_module_forward_hook(post_hook, with_kwargs=True)
