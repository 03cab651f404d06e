"""Trainer-engine parity within one run (``trace --modules --parity A:B``): module calls of the
processes labelled A and B (a Ray actor's class: ``RolloutEngine:TrainActor``) whose module
name and input fingerprint match are paired, and their outputs compared.

A call of A agrees when some call of B with the same module name and inputs gave the same
outputs (B may call a module more often with the same inputs: a reference forward beside the
policy's). The first call of A, in A's order, that has a partner but no agreeing one is named,
with where each side called it from (the first frame of the program), its output dtypes, and
the largest distance between the two outputs in units in the last place (ULP) of the coarser
dtype, read from the outputs ``parity_capture.py`` kept. Module calls fire innermost first, so
that call is the innermost module where the two processes part. Only kept calls (the first
``DETAUDIT_TRACE_KEEP`` per module name) are paired.

Fail closed: no call of A with a partner in B is not agreement, it is nothing compared.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.errors import InputError
from detaudit.fileio import read_bounded_text
from detaudit.trace.files import ModuleCall, ProcessTrace, RunTrace, regular_file
from detaudit.trace.parity_capture import VALUES_SUBDIR

MAX_INDEX_BYTES = 256 << 20
MAX_VALUE_BYTES = 1 << 34
MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23, "float64": 52}
MIN_EXPONENT = {"bfloat16": -126, "float16": -14, "float32": -126, "float64": -1022}


@dataclass
class ParityCall:
    process: ProcessTrace
    call: ModuleCall
    site: str | None = None              # where the program called it (None: not kept)
    outputs: list[dict[str, Any]] = field(default_factory=list)  # dtype, shape, offset, bytes per tensor


@dataclass
class ParityDifference:
    a: ParityCall
    b: ParityCall
    max_ulp: float | None                # None: unknown (why)
    ulp_dtype: str | None
    why_unknown: str | None = None
    tensor: int = 0                      # which output tensor differs most


@dataclass
class ParityReport:
    sides: tuple[str, str]
    processes: tuple[list[str], list[str]] = ([], [])
    calls: int = 0                       # kept module calls of A
    matched: int = 0                     # of those, with a call of B of the same name and inputs
    agreed: int = 0
    differing: int = 0
    first: ParityDifference | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.matched > 0 and self.first is None and not self.problems


def _values_index(trace_dir: Path, pid: int) -> dict[int, dict[str, Any]]:
    path = trace_dir / VALUES_SUBDIR / f"{pid}.jsonl"
    if not path.exists():
        return {}
    out = {}
    for number, line in enumerate(read_bounded_text(path, "a parity values index", MAX_INDEX_BYTES).splitlines(), 1):
        if not line.endswith("}"):
            break  # a process killed mid-write: the torn line is dropped
        try:
            entry = json.loads(line)
            seq, outputs = entry["seq"], entry["outputs"]
            if type(seq) is not int or type(outputs) is not list or type(entry.get("site")) is not str:
                raise ValueError("a line without seq, site and outputs")
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(path, f"not a parity values line: {exc}", number) from None
        out[seq] = entry
    return out


def _read_values(trace_dir: Path, pid: int, entry: dict[str, Any]) -> bytes | None:
    if "offset" not in entry:
        return None
    path = trace_dir / VALUES_SUBDIR / f"{pid}.bin"
    size = regular_file(path, "parity values", MAX_VALUE_BYTES)
    offset, length = entry["offset"], entry["bytes"]
    if type(offset) is not int or type(length) is not int or offset < 0 or length < 0 or offset + length > size:
        raise InputError(path, f"a values entry outside the file (offset {offset!r}, {length!r} bytes)")
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(length)


def _floats(raw: bytes, dtype: str) -> Any:
    import numpy as np

    if dtype == "bfloat16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.frombuffer(raw, np.dtype(dtype)).astype(np.float64)


def max_ulp(raw_a: bytes, dtype_a: str, raw_b: bytes, dtype_b: str) -> tuple[float, str]:
    """The largest distance between two outputs, in ULP of the coarser dtype (exact for one
    dtype: the distance between the two values' places in the dtype's order; across dtypes:
    the difference over the coarser dtype's ULP at the larger value). NaN in one only: inf."""
    import numpy as np

    coarse = min((dtype_a, dtype_b), key=lambda d: MANTISSA_BITS[d])
    x, y = _floats(raw_a, dtype_a), _floats(raw_b, dtype_b)
    if x.shape != y.shape:
        raise ValueError("outputs of different sizes")
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    if (nan_x != nan_y).any():
        return math.inf, coarse
    both = ~(nan_x | nan_y)
    x, y = x[both], y[both]
    if not x.size:
        return 0.0, coarse
    if dtype_a == dtype_b and dtype_a in ("bfloat16", "float16", "float32"):
        width = {"bfloat16": np.int16, "float16": np.int16, "float32": np.int32}[dtype_a]
        bits = {"bfloat16": 16, "float16": 16, "float32": 32}[dtype_a]

        def ordered(raw: bytes) -> Any:
            i = np.frombuffer(raw, width).astype(np.int64)
            return np.where(i < 0, -(1 << (bits - 1)) - i, i)[both]

        return float(np.abs(ordered(raw_a) - ordered(raw_b)).max()), coarse
    magnitude = np.maximum(np.abs(x), np.abs(y))
    exponent = np.maximum(np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0))), MIN_EXPONENT[coarse])
    ulp = np.exp2(exponent - MANTISSA_BITS[coarse])
    return float(np.ceil((np.abs(x - y) / ulp).max())), coarse


def _difference(a: ParityCall, b: ParityCall, trace_dir: Path) -> ParityDifference:
    """How far apart the outputs of two paired calls are (their first output tensor that differs)."""
    if not a.outputs or not b.outputs or len(a.outputs) != len(b.outputs):
        return ParityDifference(a, b, None, None, "their outputs were not kept alike")
    worst: tuple[float, str, int] | None = None
    for index, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=True)):
        if x["dtype"] not in MANTISSA_BITS or y["dtype"] not in MANTISSA_BITS:
            continue
        raw_x = _read_values(trace_dir, a.process.pid, x)
        raw_y = _read_values(trace_dir, b.process.pid, y)
        if raw_x is None or raw_y is None:
            return ParityDifference(a, b, None, None, f"values beyond the {VALUES_SUBDIR} bound were not kept "
                                    "(DETAUDIT_TRACE_PARITY_MB raises it)", index)
        try:
            ulp, dtype = max_ulp(raw_x, x["dtype"], raw_y, y["dtype"])
        except ImportError:
            return ParityDifference(a, b, None, None, "numpy is needed to read the values (the recipe extra)", index)
        except ValueError as exc:
            return ParityDifference(a, b, None, None, str(exc), index)
        if worst is None or ulp > worst[0]:
            worst = (ulp, dtype, index)
    if worst is None:
        return ParityDifference(a, b, None, None, "no floating output")
    return ParityDifference(a, b, worst[0], worst[1], None, worst[2])


def parity(run: RunTrace, sides: tuple[str, str]) -> ParityReport:
    """Pair the module calls of the processes labelled ``sides[0]`` and ``sides[1]`` (see the module doc)."""
    report = ParityReport(sides)
    side_a = [p for p in run.processes if p.label == sides[0]]
    side_b = [p for p in run.processes if p.label == sides[1]]
    report.processes = ([f"{p.display} (pid {p.pid})" for p in side_a], [f"{p.display} (pid {p.pid})" for p in side_b])
    for label, found in zip(sides, (side_a, side_b), strict=True):
        if not found:
            known = ", ".join(sorted({p.label for p in run.processes if not p.silent})) or "none"
            report.problems.append(f"no traced process is labelled {label!r} (labels in this run: {known})")
    if run.mode != "modules":
        report.problems.append("the run was not traced with --modules: no module calls to pair")
    if report.problems:
        return report
    trace_dir = Path(run.path)
    index = {p.pid: _values_index(trace_dir, p.pid) for p in side_a + side_b}

    def calls(processes: list[ProcessTrace]) -> list[ParityCall]:
        out = []
        for p in processes:
            for m in p.modules:
                entry = index[p.pid].get(m.seq, {})
                out.append(ParityCall(p, m, entry.get("site"), entry.get("outputs", [])))
        return out

    by_key: dict[tuple[str, str], list[ParityCall]] = {}
    for c in calls(side_b):
        by_key.setdefault((c.call.name, c.call.inputs), []).append(c)
    first: tuple[ParityCall, ParityCall] | None = None
    for c in calls(side_a):
        report.calls += 1
        partners = by_key.get((c.call.name, c.call.inputs))
        if not partners or c.call.inputs == "?":
            continue
        report.matched += 1
        if any(b.call.outputs == c.call.outputs for b in partners):
            report.agreed += 1
            continue
        report.differing += 1
        if first is None:
            first = (c, partners[0])
    if first is not None:
        report.first = _difference(first[0], first[1], trace_dir)
    return report
