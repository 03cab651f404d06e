"""Read a metrics JSONL file into per-series (step, value) points.

A line is one JSON object, as miles-style trackers write it::

    {"step_key": "rollout/step", "rollout/step": 3, "rollout/reward/raw_mean": 0.74, "perf/t": 12.1}

The step of a line is the field its ``step_key`` names; without one, the default step key
(``--step-key`` or the card's ``step_key``); without that, the first of ``STEP_KEYS`` the line
has (``step``, ``iteration``, ``global_step``, ``_step``, ``epoch``: *detected*, and reports say
so); else its 0-based line index. A step is an integer: a float without a fraction (``3.0``) is
kept as written, while a boolean, a string, a fraction, NaN or null is an error naming the line
(``true`` is no step 1, whatever Python's ``==`` says). A *series* is one key's points in
emission order; step fields are never series.

Numbers are read exactly: an integer of any size stays that integer. orjson reads integers
beyond 64 bits as the nearest float, so the few lines where a float of at least 2**63 came out
are read again with Python's json, which keeps integers exact (``big_integers``). A float
token a float64 cannot hold (``1e400``, ``1e-400``) is refused with its line (``number_tokens``).

Storage is columnar so that 200,000-line runs stay small: per series, the indices of the
lines it appears on (``array('I')``) and its values, as ``array('d')`` when every value is
a float (8 bytes a point, bits preserved, NaN included), else as a list (ints, null, bools
and strings keep their JSON type).

Lines are parsed with orjson, falling back to Python's json for the NaN / Infinity
literals that Python writes. (A ``jsonlines.Reader`` loop was measured at ~0.35 s per
200,000 lines on top of parsing, which alone broke the 2 s budget of
``benchmarks/diff_bench.py``; line numbers and the torn-tail rule are kept here instead.)
"""

from __future__ import annotations

import json
import math
import os
import struct
import warnings
from array import array
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

from detaudit.data.big_integers import INT64_EDGE, exact_integers
from detaudit.data.exclusion import Exclusion
from detaudit.data.json_keys import duplicate_key
from detaudit.data.metrics_run import LINE_INDEX, MetricsRun, Series, line_number
from detaudit.data.number_tokens import exact_float, number_error, refuse_underflow
from detaudit.data.values import MAX_DEPTH, contains_encoded_nonfinite, depth, format_value
from detaudit.errors import InputError

try:  # orjson is ~5x faster; it rejects NaN/Infinity literals, which Python's json writes.
    import orjson

    _fast_loads: Callable[[str | bytes], Any] = orjson.loads
    _FastError: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _fast_loads = json.loads
    _FastError = json.JSONDecodeError


# Bounds, so that a wrong file (/dev/zero, a binary) cannot take all memory: no metrics
# line is near 64 MiB, and no metrics file near 16 GiB (columns hold ~9 bytes a float).
MAX_LINE_BYTES = 64 << 20
MAX_FILE_BYTES = 16 << 30


class TornLineWarning(UserWarning):
    """The last line of a metrics file was cut off (a run killed mid-write) and was dropped."""


# Fields taken as a line's step when it names no step_key and none is given, in this order.
STEP_KEYS = ("step", "iteration", "global_step", "_step", "epoch")


class _BadValue(Exception):
    """A value found unfit while storing a column; read_metrics turns it into an InputError."""

    def __init__(self, line_index: int, message: str) -> None:
        super().__init__(message)
        self.line_index = line_index
        self.message = message


def _container_problem(value: Any) -> str | None:
    if depth(value) > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if contains_encoded_nonfinite(value):
        return ('holds {"float": ...}, the form standards use for NaN/Infinity; '
                "write the float itself (NaN, Infinity) instead")
    return None


def _json_type(value: Any) -> str:
    return {list: "an array", dict: "an object", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _parse_error(path: Path, lineno: int, raw: bytes, exc: Exception) -> InputError:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return InputError(path, f"line is not valid utf-8: {err}", lineno)
    message = exc.msg if isinstance(exc, json.JSONDecodeError) else number_error(exc)
    return InputError(path, f"invalid JSON: {message}", lineno)


_TORN: Any = object()  # what _slow_line returns for a cut-off last line
_UNNAMED: Any = object()  # a shape whose lines have no "step_key" field


def _slow_line(path: Path, raw: bytes, lineno: int) -> Any:
    """A line orjson refused: Python's json (NaN, Infinity), None for a blank line, ``_TORN`` for a
    cut-off last line (no newline: only the last line can lack one), else the line's InputError."""
    if len(raw) > MAX_LINE_BYTES:
        raise InputError(path, f"line is longer than {MAX_LINE_BYTES >> 20} MiB; not a metrics line", lineno)
    if not raw.strip():
        return None
    try:
        return json.loads(raw, parse_float=exact_float)
    except RecursionError:
        raise InputError(path, f"invalid JSON: nested deeper than {MAX_DEPTH} levels", lineno) from None
    except ValueError as exc:
        if raw.endswith(b"\n"):  # written whole: an error like any other
            raise _parse_error(path, lineno, raw, exc) from None
        return _TORN


def _not_an_object(path: Path, obj: Any, lineno: int) -> InputError:
    return InputError(path, f"expected a JSON object, got {'null' if obj is None else _json_type(obj)}", lineno)


def _step_error(path: Path, lineno: int, step_field: str, step: Any, detected: bool) -> InputError:
    if type(step) is float:
        what = f"{format_value(step)}, a fraction" if math.isfinite(step) else format_value(step)
    elif step is None or type(step) is bool:
        what = f"{format_value(step)}, a {'boolean' if step is not None else 'null'} (no step number)"
    else:
        what = f"{_json_type(step)} ({format_value(step)[:40]})"
    why = (" (taken as the step because the line names no step_key; choose the step field with --step-key "
           "or the card's step_key)") if detected else ""
    return InputError(path, f"step {step_field!r} must be an integer, got {what}{why}", lineno)


ROWS_PER_FLUSH = 8192


def float_bytes(floats: Sequence[float]) -> bytes:
    """Python floats as the bytes of an ``array('d')``: ``struct`` converts each in one C step,
    where ``array.extend`` parses a format string per item (about twice as slow)."""
    return struct.pack(f"{len(floats)}d", *floats)


class _Shape:
    """Lines with the same keys in the same order (and step_key): their compared values are taken
    out by one ``itemgetter`` call per line, in C.

    Per line the reader keeps only the tuple of compared values (the parsed object is freed at once,
    so the allocator reuses its memory for the next line); a flush transposes the buffered tuples
    (``zip(*rows)``) and stores each compared field as a column: ``array('d')`` while every value is
    a float, else a list. That keeps the per-value work in C and makes 200,000-line files fast to read.
    """

    __slots__ = ("step_key", "step_field", "detected", "named", "keys", "lines", "rows", "columns", "fast")

    def __init__(self, step_key: str, step_field: str | None, keys: list[str], detected: bool = False,
                 named: Any = _UNNAMED) -> None:
        self.step_key = step_key
        self.named = named  # the lines' "step_key" value (_UNNAMED: they have no such field)
        self.step_field = step_field
        self.detected = detected
        self.keys = keys  # the compared fields
        self.lines: array = array("I")
        self.rows: list[Any] = []  # per line: the compared values (one value where one key is compared)
        self.columns: list[array | list[Any]] = [array("d") for _ in keys]
        getter = itemgetter(*keys) if keys else None
        self.fast = (step_field, self.lines.append, self.rows.append, getter)  # what the per-line loop needs

    def flush(self) -> None:
        """Move buffered rows into compact storage, so memory holds few Python objects at once."""
        rows = self.rows
        if not rows:
            return
        fields = [rows] if len(self.keys) == 1 else list(zip(*rows, strict=True))
        for j, values in enumerate(fields):
            types = set(map(type, values))
            if list in types or dict in types:
                self._check_containers(self.keys[j], values)
            column = self.columns[j]
            if type(column) is array:
                if types == {float}:
                    column.frombytes(float_bytes(values))
                    continue
                column = self.columns[j] = column.tolist()
            column.extend(values)
        rows.clear()

    def _check_containers(self, key: str, values: Sequence[Any]) -> None:
        first = len(self.lines) - len(values)
        for i, value in enumerate(values):
            if type(value) in (list, dict):
                problem = _container_problem(value)
                if problem is not None:
                    raise _BadValue(self.lines[first + i], f"{key!r}: {problem}")

    def take_columns(self) -> list[array | list[Any]]:
        """Per compared key: an array('d') (all floats) or a list of values."""
        self.flush()
        columns, self.columns = self.columns, []
        return columns


def read_metrics(
    path: str | Path,
    *,
    default_step_key: str | None = None,
    exclusion: Exclusion | None = None,
    detect_step_key: bool = True,
) -> MetricsRun:
    """Read a metrics JSONL file, streaming.

    Raises ``InputError`` (``FILE:LINE: message``) for anything that is not a JSON object
    per line, an empty file, a line whose step field is missing or whose step is no integer.
    A torn final line is dropped with a ``TornLineWarning``. ``detect_step_key`` False: a line
    without a step_key (and no default) is stepped by its index, as a standard recorded before
    detection was (its series' step key ``<line>``).
    """
    path = Path(path)
    exclusion = exclusion or Exclusion()
    excluded: dict[str, str] = {}
    shapes: dict[tuple[str, ...], _Shape] = {}  # by keys: the last shape seen with them
    named_shapes: dict[tuple[Any, ...], _Shape] = {}  # by (step_key value, *keys): every shape
    line_steps: list[Any] = []
    line_offsets: list[tuple[int, int]] = []
    step_fields: dict[str, None] = {}
    detected: dict[str, None] = {}
    big_steps: list[tuple[int, str]] = []  # (line index, step field) of float steps of at least 2**63
    zero_steps: list[int] = []  # line indices of float steps read as 0.0 (a token too small for a float, maybe)
    checkpoints: list[tuple[int, int, int]] = []  # (next line index, byte offset, line number) every flush
    torn = False
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read metrics file: {exc.strerror or exc}") from None
    # The loop keeps per-line work to a few C calls: it reads every line of 200,000-line runs.
    # A line's number is its index plus the blank lines before it (counted where they are met).
    with fh:
        readline = fh.readline
        loads = _fast_loads
        fast_error = _FastError
        shape_of = shapes.get
        add_step = line_steps.append
        line_limit, file_limit, edge, unnamed = MAX_LINE_BYTES + 1, MAX_FILE_BYTES, INT64_EDGE, _UNNAMED
        flush_every = ROWS_PER_FLUSH
        next_flush = flush_every
        index = total = blanks = 0
        try:
            while True:
                raw = readline(line_limit)
                if not raw:
                    break
                total += len(raw)
                if total > file_limit:
                    raise InputError(path, f"file is larger than {file_limit >> 30} GiB; not a metrics file",
                                     index + blanks + 1)
                try:
                    obj = loads(raw)
                except fast_error:
                    obj = _slow_line(path, raw, index + blanks + 1)
                    if obj is None:  # a blank line carries nothing
                        blanks += 1
                        line_offsets.append((index, index + blanks + 1))
                        continue
                    if obj is _TORN:
                        warnings.warn(f"{path}:{index + blanks + 1}: last line is incomplete (run killed mid-write?); "
                                      "dropped", TornLineWarning, stacklevel=2)
                        torn = True
                        break
                if type(obj) is not dict:
                    raise _not_an_object(path, obj, index + blanks + 1)
                # A key named twice leaves more colons than keys; so do nested objects and colons in
                # strings, which the slow path then clears. A flat line costs one C-speed count.
                if raw.count(b":") > len(obj) and (twice := duplicate_key(raw)) is not None:
                    raise InputError(path, f"duplicate key {twice!r} (JSON readers keep the last one silently; "
                                           "name each key once)", index + blanks + 1)
                # Lines are grouped by their keys, in order; a line's step_key value is checked against
                # its group's (a string compare, where hashing it into the key would cost more).
                shape = shape_of((*obj,))
                if shape is None or shape.named is not unnamed and obj["step_key"] != shape.named:
                    shape = _shape_of(path, index + blanks + 1, obj, shapes, named_shapes, default_step_key,
                                      detect_step_key, exclusion, excluded)
                    if shape.step_field is not None:
                        step_fields[shape.step_field] = None
                        if shape.detected:
                            detected[shape.step_field] = None
                step_field, add_line, add_row, getter = shape.fast
                if step_field is None:
                    add_step(index)
                else:
                    step = obj[step_field]
                    if type(step) is not int:  # an int is the common case; the rest is checked here
                        if type(step) is not float or not step.is_integer():
                            raise _step_error(path, index + blanks + 1, step_field, step, shape.detected)
                        if not -edge < step < edge:
                            big_steps.append((index, step_field))
                        elif step == 0:  # 0.0, or a token too small for a float (number_tokens)
                            zero_steps.append(index)
                    add_step(step)
                add_line(index)
                if getter is not None:
                    add_row(getter(obj))
                index += 1
                if index >= next_flush:
                    next_flush += flush_every
                    checkpoints.append((index, total, index + blanks + 1))  # where the next line starts
                    for each in named_shapes.values():
                        each.flush()
        except _BadValue as bad:
            raise InputError(path, bad.message, line_number(line_offsets, bad.line_index)) from None
    if not line_steps:
        raise InputError(path, "empty metrics file (no JSON lines)", None)
    try:
        series = _assemble(named_shapes.values(), step_fields)
    except _BadValue as bad:
        raise InputError(path, bad.message, line_number(line_offsets, bad.line_index)) from None
    exact_integers(path, series, line_steps, big_steps, line_offsets, MAX_LINE_BYTES)
    refuse_underflow(path, series, zero_steps, checkpoints, MAX_LINE_BYTES)
    return MetricsRun(
        path=str(path),
        series=series,
        line_steps=line_steps,
        excluded=dict(sorted(excluded.items())),
        torn_last_line=torn,
        line_offsets=line_offsets,
        shape_lines=[(shape.lines, shape.step_key) for shape in named_shapes.values()],
        detected_step_keys=list(detected),
    )


def _shape_of(path: Path, lineno: int, obj: dict[str, Any], shapes: dict[tuple[str, ...], _Shape],
              named_shapes: dict[tuple[Any, ...], _Shape], default_step_key: str | None, detect: bool,
              exclusion: Exclusion, excluded: dict[str, str]) -> _Shape:
    """The shape of a line whose keys or step_key value differ from the last line with those keys."""
    keys = (*obj,)
    value = obj.get("step_key", _UNNAMED)
    if not (value is _UNNAMED or value is None or type(value) is str):
        raise InputError(path, f"step_key must be a string, got {format_value(value)[:60]}", lineno)
    named = (value, *keys)
    shape = named_shapes.get(named)
    if shape is None:
        shape = named_shapes[named] = _new_shape(path, lineno, obj, default_step_key, detect, exclusion, excluded)
    shapes[keys] = shape
    return shape


def _new_shape(path: Path, lineno: int, obj: dict[str, Any], default_step_key: str | None, detect: bool,
               exclusion: Exclusion, excluded: dict[str, str]) -> _Shape:
    step_key = obj.get("step_key")
    if step_key is None:  # no step_key field, or null: the option's, else detected
        step_key = default_step_key
    detected = False
    if step_key is None and detect:
        step_key = next((key for key in STEP_KEYS if key in obj), None)
        detected = step_key is not None
    if step_key is None:
        step_key, step_field = LINE_INDEX, None
    elif not isinstance(step_key, str):
        raise InputError(path, f"step_key must be a string, got {step_key!r}", lineno)
    else:
        step_field = step_key
        if step_key not in obj:
            raise InputError(path, f"step field {step_key!r} is missing", lineno)
    keys = []
    for key in obj:
        if key == "step_key" or key == step_field:
            continue
        reason = exclusion.reason(key)
        if reason is not None:
            excluded[key] = reason
            continue
        keys.append(key)
    return _Shape(step_key, step_field, keys, detected, obj.get("step_key", _UNNAMED))


def _assemble(shapes: Iterable[_Shape], step_fields: dict[str, None]) -> dict[str, Series]:
    """Columns per shape -> one Series per key, points in line order."""
    parts: dict[str, list[tuple[array, Any, str, int]]] = {}
    for shape in shapes:
        if not shape.lines or not shape.keys:
            continue
        columns = shape.take_columns()
        for position, (key, column) in enumerate(zip(shape.keys, columns, strict=False)):
            if key in step_fields:
                continue  # a step key is never a series, also where a line carries it as a field
            parts.setdefault(key, []).append((shape.lines, column, shape.step_key, position))
    # Emission order of series: the line of first appearance, then the position in that line.
    first_seen = [(*min((c[0][0], c[3]) for c in chunks), key) for key, chunks in parts.items()]
    series: dict[str, Series] = {}
    for order, (_, _, key) in enumerate(sorted(first_seen)):
        chunks = parts[key]
        lines: array | list[int]
        if len(chunks) == 1:
            lines, values = chunks[0][0], chunks[0][1]
        else:  # the key appears in lines of several shapes: merge by line index
            merged = sorted((i, n, v) for n, c in enumerate(chunks) for i, v in zip(c[0], c[1], strict=False))
            lines = [m[0] for m in merged]
            values = tuple(m[2] for m in merged)
        first_chunk = min(chunks, key=lambda c: c[0][0])
        stored: array | list
        if type(values) is array:
            stored = values
        elif set(map(type, values)) == {float}:
            stored = array("d", float_bytes(values))
        else:
            stored = list(values)
        series[key] = Series(key, first_chunk[2], lines if type(lines) is array else array("I", lines), stored, order)
    return series


# Files at least this big are parsed in parallel worker processes (fork start-up and
# pickling the columns back cost ~20 ms; parsing 200,000 lines costs ~1 s).
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


def _read_for_pool(path: str, default_step_key: str | None, exclusion: Exclusion) -> tuple[MetricsRun, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TornLineWarning)
        run = read_metrics(path, default_step_key=default_step_key, exclusion=exclusion)
    return run, [str(w.message) for w in caught if issubclass(w.category, TornLineWarning)]


def read_metrics_many(
    paths: Iterable[str | Path],
    *,
    default_step_key: str | None = None,
    exclusion: Exclusion | None = None,
    parallel: bool | None = None,
) -> list[MetricsRun]:
    """Read several metrics files; big files are parsed in parallel (one process each).

    ``parallel`` None decides by file size and CPU count. Errors and warnings are the same
    as ``read_metrics``'s, for the first bad file in argument order.
    """
    files = [Path(p) for p in paths]
    exclusion = exclusion or Exclusion()
    if parallel is None and os.environ.get("DETAUDIT_JOBS") == "1":
        parallel = False
    if parallel is None:
        try:
            big = sum(p.stat().st_size >= PARALLEL_MIN_BYTES for p in files)
        except OSError:
            big = 0
        parallel = big >= 2 and (os.cpu_count() or 1) >= 2
    if not parallel or len(files) < 2:
        return [read_metrics(p, default_step_key=default_step_key, exclusion=exclusion) for p in files]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = min(len(files) - 1, (os.cpu_count() or 2) - 1) or 1
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_read_for_pool, str(p), default_step_key, exclusion) for p in files[1:]]
        first = _read_for_pool(str(files[0]), default_step_key, exclusion)  # this process reads one too
        results = [first] + [f.result() for f in futures]
    runs = []
    for run, messages in results:
        for message in messages:
            warnings.warn(message, TornLineWarning, stacklevel=2)
        runs.append(run)
    return runs
