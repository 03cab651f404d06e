"""A fingerprint of the tensors in a value (a tensor, or tuples/lists/dicts of them): a hash
of each tensor's dtype, shape and bytes (a DTensor: this rank's shard; on a GPU: copied to the
CPU first), of numpy arrays alike, and of the strings, numbers, booleans, None and dict keys
around them, and torch's dtypes and devices (an op called with another ``mode=``, scale or
dtype has other inputs). Other objects count by their type name only. Used for module calls and torch ops."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 4  # nesting of tuples/lists/dicts searched for tensors


def fingerprinter(torch: Any) -> Callable[..., str]:
    """``fingerprint(*values) -> str`` for this torch."""
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
                elif value is None or isinstance(value, (bool, int, float, complex)):
                    digest.update(f"{type(value).__name__}:{value!r};".encode())
                elif type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "dtype"):
                    digest.update(f"ndarray{value.dtype}{getattr(value, 'shape', ())};".encode())
                    digest.update(value.tobytes())
                elif type(value).__module__ == "torch":  # torch.float16, device(type='cuda', index=0)
                    digest.update(f"{value!r};".encode())
                else:
                    digest.update(f"<{type(value).__name__}>;".encode())
        return digest.hexdigest()

    return fingerprint


def has_tensor(value: Any, tensor_type: type, depth: int = 0) -> bool:
    """Whether ``value`` holds a tensor within MAX_DEPTH levels of tuples, lists and dicts."""
    if isinstance(value, tensor_type):
        return True
    if depth >= MAX_DEPTH:
        return False
    if isinstance(value, (tuple, list)):
        return any(has_tensor(v, tensor_type, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(has_tensor(v, tensor_type, depth + 1) for v in value.values())
    return False
