"""Read a metrics JSONL file into per-series (step, value) points.

A line is one JSON object, as miles-style trackers write it::

    {"step_key": "rollout/step", "rollout/step": 3, "rollout/reward/raw_mean": 0.74, "perf/t": 12.1}

``step_key`` names the field that holds the line's step. A line without it uses the
default step key (``--step-key`` or the card's ``step_key``), else its 0-based line index.
A *series* is one key's points in emission order; step-key fields are never series.

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
import os
import warnings
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

from detaudit.data.exclusion import Exclusion
from detaudit.data.values import MAX_DEPTH, contains_encoded_nonfinite, depth
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


def loads_line(text: str | bytes) -> Any:
    """Parse one line: orjson first, Python's json (NaN, Infinity, -Infinity) as fallback.

    ``ValueError`` for anything that is not one JSON value, also for nesting deeper than
    Python's recursion limit.
    """
    try:
        return _fast_loads(text)
    except _FastError:
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None


class DuplicateKey(ValueError):
    """A JSON object names ``key`` twice (raised by ``unique_pairs``)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads`` that refuses a key named twice in one object
    (Python's json, like orjson, keeps the last one silently). Standards use it too."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def duplicate_key(raw: bytes) -> str | None:
    """A key that a line's JSON names twice in one object, else None (orjson and json keep the
    last one silently). Parses again with a hook that sees every key: the slow path, taken only
    for a line with more colons than its object has keys (see ``read_metrics``)."""
    try:
        json.loads(raw, object_pairs_hook=unique_pairs)
    except DuplicateKey as dup:
        return dup.key
    return None


class TornLineWarning(UserWarning):
    """The last line of a metrics file was cut off (a run killed mid-write) and was dropped."""


LINE_INDEX = "<line>"


def steps_at(line_steps: list[Any], lines: array) -> list[Any]:
    """The steps of the given line indices (one C call for the common many-line case)."""
    if len(lines) > 1:
        return list(itemgetter(*lines)(line_steps))
    return [line_steps[i] for i in lines]  # the step key of lines that have no step_key and no default


@dataclass
class Series:
    """One metric's points: line indices into ``MetricsRun.line_steps`` and values."""

    name: str
    step_key: str
    lines: array = field(default_factory=lambda: array("I"))
    values: array | list = field(default_factory=lambda: array("d"))
    order: int = 0  # position of the series' first appearance, for emission order

    def __len__(self) -> int:
        return len(self.lines)

    def steps(self, run: MetricsRun) -> list[Any]:
        return steps_at(run.line_steps, self.lines)


@dataclass
class MetricsRun:
    """A parsed metrics file."""

    path: str
    series: dict[str, Series]
    line_steps: list[Any]  # the step of each kept line, by 0-based line index
    excluded: dict[str, str]  # series name -> reason it was excluded
    torn_last_line: bool = False
    # (kept-line index, file line number) wherever blank lines shifted the numbering
    line_offsets: list[tuple[int, int]] = field(default_factory=list)
    # (line indices, step key) per line shape; the per-line step key is derived on demand
    shape_lines: list[tuple[list[int], str]] = field(default_factory=list, repr=False)
    _line_step_keys: list[str] | None = field(default=None, repr=False)

    def line_number(self, index: int) -> int:
        """1-based line number in the file of the kept line ``index``."""
        return _line_number(self.line_offsets, index)

    @property
    def line_step_keys(self) -> list[str]:
        """The step key of each kept line (built once, when a report needs it)."""
        if self._line_step_keys is None:
            keys = [LINE_INDEX] * len(self.line_steps)
            for lines, step_key in self.shape_lines:
                for i in lines:
                    keys[i] = step_key
            self._line_step_keys = keys
        return self._line_step_keys


def _line_number(line_offsets: list[tuple[int, int]], index: int) -> int:
    at = bisect_right(line_offsets, (index, 1 << 62)) - 1
    if at < 0:
        return index + 1
    first_index, first_line = line_offsets[at]
    return first_line + (index - first_index)


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
    message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    return InputError(path, f"invalid JSON: {message}", lineno)


ROWS_PER_FLUSH = 8192


class _Shape:
    """Lines with the same keys (and step_key): their series are taken out in one C call each.

    Per line the reader only appends the line index and ``itemgetter(obj)``, a tuple of
    the compared values; columns are built at the end with ``zip(*rows)``. That keeps the
    per-value work in C and makes 200,000-line files fast to read.
    """

    __slots__ = ("step_key", "step_field", "keys", "getter", "lines", "rows", "single", "flat", "columns")

    def __init__(self, step_key: str, step_field: str | None, keys: list[str]) -> None:
        self.step_key = step_key
        self.step_field = step_field
        self.keys = keys
        self.single = len(keys) == 1
        self.getter = itemgetter(*keys) if keys else None
        self.lines: list[int] = []
        self.rows: list[Any] = []
        self.flat: array | None = array("d")  # row-major floats while every value is a float
        self.columns: list[list[Any]] | None = None  # per-key values once a non-float appeared

    def flush(self) -> None:
        """Move buffered rows into compact storage, so memory holds few Python floats at once."""
        rows, self.rows = self.rows, []
        if not rows:
            return
        types = set(map(type, rows if self.single else chain.from_iterable(rows)))
        if list in types or dict in types:
            self._check_containers(rows)
        if self.flat is not None:
            if types == {float}:
                self.flat.extend(rows if self.single else chain.from_iterable(rows))
                return
            width = len(self.keys)
            self.columns = [self.flat[j::width].tolist() for j in range(width)]
            self.flat = None
        assert self.columns is not None
        if self.single:
            self.columns[0].extend(rows)
        else:
            for column, new in zip(self.columns, zip(*rows, strict=False), strict=False):
                column.extend(new)

    def _check_containers(self, rows: list[Any]) -> None:
        first = len(self.lines) - len(rows)
        for i, row in enumerate(rows):
            for key, value in zip(self.keys, (row,) if self.single else row, strict=False):
                if type(value) in (list, dict):
                    problem = _container_problem(value)
                    if problem is not None:
                        raise _BadValue(self.lines[first + i], f"{key!r}: {problem}")

    def take_columns(self) -> list[Any]:
        """Per key: an array('d') (all floats) or a list of values."""
        self.flush()
        if self.flat is not None:
            width = len(self.keys)
            flat, self.flat = self.flat, None
            return [flat[j::width] for j in range(width)]  # a column is a strided slice
        columns, self.columns = self.columns or [], None
        return columns


def read_metrics(
    path: str | Path,
    *,
    default_step_key: str | None = None,
    exclusion: Exclusion | None = None,
) -> MetricsRun:
    """Read a metrics JSONL file, streaming.

    Raises ``InputError`` (``FILE:LINE: message``) for anything that is not a JSON object
    per line, an empty file, or a line whose step field is missing. A torn final line is
    dropped with a ``TornLineWarning``.
    """
    path = Path(path)
    exclusion = exclusion or Exclusion()
    excluded: dict[str, str] = {}
    shapes: dict[tuple[Any, ...], _Shape] = {}
    line_steps: list[Any] = []
    line_offsets: list[tuple[int, int]] = []
    step_fields: dict[str, None] = {}
    torn = False
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read metrics file: {exc.strerror or exc}") from None
    with fh:
        pending: tuple[int, bytes, Exception] | None = None
        lineno = 0
        total = 0
        readline = fh.readline
        while True:
            raw = readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(path, f"line is longer than {MAX_LINE_BYTES >> 20} MiB; not a metrics line", lineno)
            if total > MAX_FILE_BYTES:
                raise InputError(path, f"file is larger than {MAX_FILE_BYTES >> 30} GiB; not a metrics file", lineno)
            if pending is not None:
                raise _parse_error(path, *pending)
            try:
                obj = loads_line(raw)
            except ValueError as exc:
                if not raw.strip():
                    line_offsets.append((len(line_steps), lineno + 1))
                    continue  # blank lines carry nothing
                pending = (lineno, raw, exc)
                continue
            if type(obj) is not dict:
                if obj is None:
                    raise InputError(path, "expected a JSON object, got null", lineno)
                raise InputError(path, f"expected a JSON object, got {_json_type(obj)}", lineno)
            # A key named twice leaves more colons than keys; so do nested objects and colons in
            # strings, which the slow path then clears. A flat line costs one C-speed count.
            if raw.count(b":") > len(obj) and (twice := duplicate_key(raw)) is not None:
                raise InputError(path, f"duplicate key {twice!r} (JSON readers keep the last one silently; "
                                       "name each key once)", lineno)
            shape_key = (obj.get("step_key"), *obj)
            shape = shapes.get(shape_key)
            if shape is None:
                shape = shapes[shape_key] = _new_shape(path, lineno, obj, default_step_key, exclusion, excluded)
                if shape.step_field is not None:
                    step_fields[shape.step_field] = None
            index = len(line_steps)
            if shape.step_field is not None:
                step = obj[shape.step_field]
                if type(step) in (list, dict):
                    raise InputError(path, f"step {shape.step_field!r} must be a number or a string, got {_json_type(step)}", lineno)
                line_steps.append(step)
            else:
                line_steps.append(index)
            shape.lines.append(index)
            if shape.getter is not None:
                rows = shape.rows
                rows.append(shape.getter(obj))
                if len(rows) >= ROWS_PER_FLUSH:
                    try:
                        shape.flush()
                    except _BadValue as bad:
                        raise InputError(path, bad.message, _line_number(line_offsets, bad.line_index)) from None
        if pending is not None:
            # Only an unterminated last line is a torn write; a bad last line with its
            # newline was written whole, so it is an error like any other.
            lineno, raw, parse_error = pending
            if raw.endswith(b"\n"):
                raise _parse_error(path, lineno, raw, parse_error)
            warnings.warn(f"{path}:{lineno}: last line is incomplete (run killed mid-write?); dropped",
                          TornLineWarning, stacklevel=2)
            torn = True
    if not line_steps:
        raise InputError(path, "empty metrics file (no JSON lines)", None)
    try:
        series = _assemble(shapes.values(), step_fields)
    except _BadValue as bad:
        raise InputError(path, bad.message, _line_number(line_offsets, bad.line_index)) from None
    return MetricsRun(
        path=str(path),
        series=series,
        line_steps=line_steps,
        excluded=dict(sorted(excluded.items())),
        torn_last_line=torn,
        line_offsets=line_offsets,
        shape_lines=[(shape.lines, shape.step_key) for shape in shapes.values()],
    )


def _new_shape(path: Path, lineno: int, obj: dict[str, Any], default_step_key: str | None,
               exclusion: Exclusion, excluded: dict[str, str]) -> _Shape:
    step_key = obj.get("step_key", default_step_key)
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
    return _Shape(step_key, step_field, keys)


def _assemble(shapes: Iterable[_Shape], step_fields: dict[str, None]) -> dict[str, Series]:
    """Columns per shape -> one Series per key, points in line order."""
    parts: dict[str, list[tuple[list[int], Any, str, int]]] = {}
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
            stored = array("d", values)
        else:
            stored = list(values)
        series[key] = Series(key, first_chunk[2], array("I", lines), stored, order)
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
