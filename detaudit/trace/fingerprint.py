"""A fingerprint of the tensors in a value (a tensor, or tuples/lists/dicts of them): a hash
of each tensor's dtype, shape and contents (a DTensor: this rank's shard), of numpy arrays
alike, and of the strings, numbers, booleans, None and dict keys around them, and torch's
dtypes and devices (an op called with another ``mode=``, scale or dtype has other inputs).
Other objects count by their type name only. Used for module calls and torch ops.

A CPU tensor's bytes are hashed on the host. A tensor on a GPU is digested where it lies: its
bytes read as 64-bit words, two sums mod 2**64 (of the words, and of each word times an odd
weight drawn from its position, so that moving a value changes the digest; integer sums, so
the same bits give the same digest in any reduction order), 16 bytes per tensor left on the
device. ``fingerprint`` then returns a :class:`Pending` fingerprint, and :func:`resolve` brings
many of them to the host in one copy (one synchronisation instead of one per tensor) and
finishes their hashes. Every GPU digest is a function of the tensor's bits alone: two runs
agree exactly when the bits do (up to a 2**-64-scale chance of two different tensors colliding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 4  # nesting of tuples/lists/dicts searched for tensors
_WEIGHT_STEP = 0x9E3779B97F4A7C15 - (1 << 64)   # the golden-ratio constant, as a signed 64-bit int
_WEIGHT_START = 0x632BE59BD9B4E019


class Pending:
    """A fingerprint whose GPU digests are still on the device: the host bytes and device digest
    slots it hashes, in order (``str(p)`` only after :func:`resolve`)."""

    __slots__ = ("parts", "value")

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts   # bytes, or a device tensor of 2 int64 (a digest)
        self.value: str | None = None

    def __str__(self) -> str:
        if self.value is None:
            raise RuntimeError("a pending fingerprint read before resolve()")
        return self.value


def resolve(pending: list[Pending]) -> None:
    """Bring every device digest of ``pending`` to the host (one copy per device) and finish
    each fingerprint's hash."""
    slots: dict[Any, list[Any]] = {}
    for p in pending:
        for part in p.parts:
            if not isinstance(part, bytes):
                slots.setdefault(part.device, []).append(part)
    host: dict[int, bytes] = {}
    for tensors in slots.values():
        import torch

        words = torch.stack(tensors).cpu().numpy()  # the one synchronisation
        for tensor, row in zip(tensors, words, strict=True):
            host[id(tensor)] = row.tobytes()
    for p in pending:
        digest = hashlib.blake2b(digest_size=8)
        for part in p.parts:
            digest.update(part if isinstance(part, bytes) else host[id(part)])
        p.value = digest.hexdigest()
        p.parts = []


def local_tensor(torch: Any, t: Any) -> Any:
    """``t`` detached, as this process holds it: a DTensor's local shard (FSDP2), a sparse tensor dense."""
    t = t.detach()
    to_local = getattr(t, "to_local", None)  # DTensor (FSDP2): this rank's shard
    if to_local is not None:
        t = to_local()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t


def fingerprinter(torch: Any, digest_devices: tuple[str, ...] = ("cuda",)) -> Callable[..., str | Pending]:
    """``fingerprint(*values) -> str`` for this torch, or a :class:`Pending` when a value holds a
    tensor on one of ``digest_devices`` (digested there; none: every tensor's bytes are copied to
    the host and hashed there)."""
    Tensor = torch.Tensor

    def local(t: Any) -> Any:
        return local_tensor(torch, t)

    def host_bytes(t: Any) -> Any:
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        t = t.contiguous().reshape(-1)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        return t.view(torch.uint8).numpy().tobytes()

    def device_digest(t: Any) -> Any:
        """Two int64 on ``t``'s device: the sum of its 64-bit words and their position-weighted sum."""
        raw = t.contiguous().reshape(-1)
        if raw.is_complex():
            raw = torch.view_as_real(raw).reshape(-1)
        raw = raw.view(torch.uint8)
        pad = (-raw.numel()) % 8
        if pad:
            raw = torch.cat([raw, raw.new_zeros(pad)])
        elif raw.storage_offset() % 8:  # a view that starts mid-word: words need their own storage
            raw = raw.clone()
        words = raw.view(torch.int64)
        weights = torch.arange(words.numel(), device=words.device, dtype=torch.int64)
        constants = torch.tensor([_WEIGHT_STEP, _WEIGHT_START], dtype=torch.int64, device=words.device)
        weights.mul_(constants[0]).add_(constants[1]).bitwise_or_(1)  # wraps mod 2**64: odd, position-unique
        return torch.stack([words.sum(), (words * weights).sum()])

    def fingerprint(*values: Any) -> str | Pending:
        parts: list[Any] = []
        text: list[bytes] = []

        def put(data: bytes) -> None:
            text.append(data)

        def put_device(slot: Any) -> None:
            if text:
                parts.append(b"".join(text))
                text.clear()
            parts.append(slot)

        stack = [(v, 0) for v in reversed(values)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, Tensor):
                put(f"{value.dtype}{tuple(value.shape)};".encode())
                t = local(value)
                if t.device.type == "meta":
                    continue
                if t.device.type in digest_devices and t.numel():
                    put_device(device_digest(t))
                else:
                    put(host_bytes(t))
            elif depth < MAX_DEPTH:
                if isinstance(value, (tuple, list)):
                    stack.extend((v, depth + 1) for v in reversed(value))
                elif isinstance(value, dict):
                    for key in sorted(value, key=str, reverse=True):
                        stack.append((value[key], depth + 1))
                        stack.append((str(key), depth + 1))
                elif isinstance(value, str):
                    put(value.encode() + b";")
                elif value is None or isinstance(value, (bool, int, float, complex)):
                    put(f"{type(value).__name__}:{value!r};".encode())
                elif type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "dtype"):
                    put(f"ndarray{value.dtype}{getattr(value, 'shape', ())};".encode())
                    put(value.tobytes())
                elif type(value).__module__ == "torch":  # torch.float16, device(type='cuda', index=0)
                    put(f"{value!r};".encode())
                else:
                    put(f"<{type(value).__name__}>;".encode())
        if text:
            parts.append(b"".join(text))
        if any(not isinstance(p, bytes) for p in parts):
            return Pending(parts)
        digest = hashlib.blake2b(digest_size=8)
        for part in parts:
            digest.update(part)
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
