"""``--parity A:B`` inside the processes it names (modules mode): keep the outputs of each kept
module call, so that ``parity.py`` can say by how many ULP two calls with the same inputs
differ, and where each was called from.

A process takes part when its label (a Ray actor's class, ``main``, ...) is A or B. Per kept
module call it writes one line to ``<trace dir>/values/<pid>.jsonl`` (the call's ``seq`` in the
ledger, the call site: the first frame of the program, and per output tensor its dtype, shape,
and where its bytes are in ``<pid>.bin``: the tensor copied to the CPU, as stored). At most
``$DETAUDIT_TRACE_PARITY_MB`` MiB of values per process (default 256): beyond, calls are
indexed without values, and the report says the ULP is unknown.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from detaudit.trace import DIR_ENV, PARITY_ENV
from detaudit.trace.fingerprint import local_tensor
from detaudit.trace.recorder import Recorder

VALUES_SUBDIR = "values"
LIMIT_ENV = "DETAUDIT_TRACE_PARITY_MB"
DEFAULT_LIMIT_MB = 256
MAX_TENSORS = 8  # output tensors kept per call


def parity_sides(text: str | None) -> tuple[str, str] | None:
    """``A:B`` as the two process labels; None when it is not two non-empty labels."""
    if not text or text.count(":") != 1:
        return None
    a, b = (part.strip() for part in text.split(":"))
    return (a, b) if a and b and a != b else None


def _tensors(value: Any, tensor_type: type, depth: int = 0) -> list[Any]:
    if isinstance(value, tensor_type):
        return [value]
    if depth >= 4:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v, tensor_type, depth + 1)]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in _tensors(value[k], tensor_type, depth + 1)]
    return []


class Capture:
    def __init__(self, rec: Recorder, torch: Any, sides: tuple[str, str], limit: int) -> None:
        self.rec, self.torch, self.sides, self.limit = rec, torch, sides, limit
        self.lock = threading.Lock()
        self.written = 0
        self.files: tuple[Any, Any] | None = None
        self.pid = -1

    def _open(self) -> tuple[Any, Any]:
        if self.files is None or self.pid != os.getpid():  # a fork child writes files of its own
            folder = os.path.join(os.environ.get(DIR_ENV) or self.rec.trace_dir, VALUES_SUBDIR)
            os.makedirs(folder, exist_ok=True)
            self.pid, self.written = os.getpid(), 0
            self.files = (open(os.path.join(folder, f"{self.pid}.jsonl"), "a", buffering=1, encoding="utf-8"),
                          open(os.path.join(folder, f"{self.pid}.bin"), "ab"))
        return self.files

    def _bytes(self, t: Any) -> Any:
        torch = self.torch
        t = local_tensor(torch, t)
        if t.device.type == "meta":
            return None
        t = t.cpu().contiguous().reshape(-1)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        return t.view(torch.uint8).numpy().tobytes()

    def for_call(self, output: Any) -> Callable[[int, int], None] | None:
        """What ``Recorder.module`` calls for a kept call of this process, or None when this
        process is not one of the two sides."""
        who = self.rec.identity or {}
        if who.get("label") not in self.sides:
            return None
        site, _ = self.rec.sites.site(3)

        def keep(seq: int, n: int) -> None:
            tensors = []
            with self.lock:
                index, data = self._open()
                for t in _tensors(output, self.torch.Tensor)[:MAX_TENSORS]:
                    raw = self._bytes(t) if self.written < self.limit else None
                    entry: dict[str, Any] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
                    if raw is not None and self.written + len(raw) <= self.limit:
                        entry.update(offset=data.tell(), bytes=len(raw))
                        data.write(raw)
                        self.written += len(raw)
                    tensors.append(entry)
                data.flush()
                index.write(json.dumps({"seq": seq, "n": n, "site": site, "outputs": tensors},
                                       separators=(",", ":"), sort_keys=True) + "\n")

        return keep


def capturer(rec: Recorder, torch: Any) -> Callable[[Any], Callable[[int, int], None] | None] | None:
    """``for_call`` of this process's capture, or None when the run has no ``--parity``."""
    sides = parity_sides(os.environ.get(PARITY_ENV))
    if sides is None:
        return None
    text = os.environ.get(LIMIT_ENV, "")
    limit = (int(text) if text.isdigit() else DEFAULT_LIMIT_MB) << 20
    return Capture(rec, torch, sides, limit).for_call
