"""Frames as the arrival and seed hooks need them: which invocation of a function a frame is,
and a call's plain arguments as a short, stable text.

An invocation is numbered per code object (``generate`` call 1, 2, ...), so that it means the
same in every run. A frame object can be neither weakly referenced nor given attributes, and its
``id`` is reused as soon as it is freed (the next call of the same function usually gets it);
``f_trace`` is the one slot a frame carries that Python leaves alone while no debugger traces
it, so the invocation's number is kept there, as a trace function that does nothing. A frame a
debugger already traces keeps its own: it is then told apart by ``id`` only (two calls in a row
may read as one).
"""

from __future__ import annotations

from types import FrameType
from typing import Any

MAX_KEY_CHARS = 400   # a call's plain arguments, as text
MAX_ITEMS = 16        # items of a list, tuple or dict written out
MAX_DEPTH = 3


class _Invocation:
    """Kept in ``frame.f_trace``: the number of this call of the frame's function."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        return None  # called only if a debugger starts tracing this frame: stop tracing it, as before


class Invocations:
    """Numbers the calls of each function as the hooks meet them."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.by_id: dict[int, tuple[Any, int]] = {}  # frames a debugger traces: id -> (code, number)

    def number(self, frame: FrameType) -> int:
        """The number of the call of ``frame``'s function that ``frame`` is (1-based)."""
        mark = frame.f_trace
        if isinstance(mark, _Invocation):
            return mark.number
        code = frame.f_code
        if mark is None:
            number = self.counts[code] = self.counts.get(code, 0) + 1
            frame.f_trace = _Invocation(number)
            return number
        known = self.by_id.get(id(frame))
        if known is not None and known[0] is code:
            return known[1]
        number = self.counts[code] = self.counts.get(code, 0) + 1
        if len(self.by_id) > 4096:
            self.by_id.clear()
        self.by_id[id(frame)] = (code, number)
        return number


def plain(value: Any, depth: int = 0) -> str:
    """A value as text when it is plain data (numbers, strings, None, and lists, tuples and
    dicts of them); anything else by its type name, a tensor or array with its shape. The
    same call gives the same text in every run (no ids, no addresses)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        text = repr(value)
        return text if len(text) <= 80 else text[:80] + "..."
    shape = getattr(value, "shape", None)
    if shape is not None and type(value).__module__.split(".")[0] in ("torch", "numpy"):
        try:
            return f"<{type(value).__name__}{tuple(shape)}>"
        except TypeError:
            pass
    if depth < MAX_DEPTH:
        if isinstance(value, (list, tuple)):
            items = [plain(v, depth + 1) for v in value[:MAX_ITEMS]]
            more = ", ..." if len(value) > MAX_ITEMS else ""
            return ("[" + ", ".join(items) + more + "]") if isinstance(value, list) else \
                ("(" + ", ".join(items) + more + ")")
        if isinstance(value, dict):
            items = [f"{plain(k, depth + 1)}: {plain(v, depth + 1)}" for k, v in list(value.items())[:MAX_ITEMS]]
            return "{" + ", ".join(items) + (", ..." if len(value) > MAX_ITEMS else "") + "}"
    return f"<{type(value).__name__}>"


def call_text(name: str, args: tuple, kwargs: dict[str, Any]) -> str:
    """``name(arg, ..., key=value)`` with each argument as ``plain`` writes it, bounded."""
    parts = [plain(a) for a in args] + [f"{k}={plain(v)}" for k, v in sorted(kwargs.items())]
    text = f"{name}({', '.join(parts)})"
    return text if len(text) <= MAX_KEY_CHARS else text[:MAX_KEY_CHARS] + "...)"


def frame_call_text(frame: FrameType, name: str) -> str:
    """The call a frame is running, as ``call_text`` writes it: its function's arguments (the
    values they hold now), ``self`` and ``cls`` left out."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = code.co_varnames[:count]
    local = frame.f_locals
    # ".0": the iterator a comprehension's own frame gets (Python 3.11)
    kwargs = {n: local[n] for n in names if n not in ("self", "cls", ".0") and n in local}
    return call_text(name, (), kwargs)
