"""Read a metrics JSONL file into per-series (step, value) points.

A line is one JSON object, as miles-style trackers write it::

    {"step_key": "rollout/step", "rollout/step": 3, "rollout/reward/raw_mean": 0.74, "perf/t": 12.1}

``step_key`` names the field that holds the line's step. A line without it uses the
default step key (``--step-key`` or the card's ``step_key``), else its 0-based line index.
A *series* is one key's points in emission order; step-key fields are never series.

Storage is columnar so that 200,000-line runs stay small: per series, the indices of the
lines it appears on (``array('I')``) and its values, kept as ``array('d')`` while every
value is a float (8 bytes a point, bits preserved, NaN included) and as a list once a
non-float shows up (ints, null, bools and strings keep their JSON type).
"""

from __future__ import annotations

import json
import os
import warnings
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import jsonlines

from detaudit.errors import InputError
from detaudit.exclusion import Exclusion

try:  # orjson is ~5x faster; it rejects NaN/Infinity literals, which Python's json writes.
    import orjson

    _fast_loads = orjson.loads
    _FastError: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _fast_loads = json.loads
    _FastError = json.JSONDecodeError


def loads_line(text: str | bytes) -> Any:
    """Parse one line: orjson first, Python's json (NaN, Infinity, -Infinity) as fallback."""
    try:
        return _fast_loads(text)
    except _FastError:
        return json.loads(text)


class TornLineWarning(UserWarning):
    """The last line of a metrics file was cut off (a run killed mid-write) and was dropped."""


LINE_INDEX = "<line>"  # the step key of lines that have no step_key and no default


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

    def steps(self, run: "MetricsRun") -> list[Any]:
        steps = run.line_steps
        return [steps[i] for i in self.lines]

    def points(self, run: "MetricsRun") -> list[list[Any]]:
        return [[run.line_steps[i], v] for i, v in zip(self.lines, self.values)]


@dataclass
class MetricsRun:
    """A parsed metrics file."""

    path: str
    series: dict[str, Series]
    line_steps: list[Any]  # the step of each kept line, by 0-based line index
    line_numbers: array  # 1-based file line number of each kept line
    line_step_keys: list[str]  # the step key of each kept line
    step_keys: list[str]
    excluded: dict[str, str]  # series name -> reason it was excluded
    torn_last_line: bool = False

    def names(self) -> list[str]:
        return list(self.series)


def _file_ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        try:
            fh.seek(-1, os.SEEK_END)
        except OSError:
            return True
        return fh.read(1) == b"\n"


def _iter_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, object); raise InputError on bad lines, warn on a torn tail."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read metrics file: {exc.strerror or exc}") from None
    current = [0]

    def numbered_lines() -> Iterator[bytes]:
        # jsonlines keeps no public line number for lines it read well; count them here.
        for number, line in enumerate(fh, 1):
            current[0] = number
            yield line

    with fh, jsonlines.Reader(numbered_lines(), loads=loads_line) as reader:
        pending: jsonlines.InvalidLineError | None = None
        while True:
            try:
                obj = reader.read(skip_empty=True)
            except EOFError:
                break
            except jsonlines.InvalidLineError as exc:
                if pending is not None:
                    raise _bad_line(path, pending) from None
                pending = exc
                continue
            if pending is not None:
                raise _bad_line(path, pending) from None
            if not isinstance(obj, dict):
                raise InputError(path, f"expected a JSON object, got {_json_type(obj)}", current[0])
            yield current[0], obj
        if pending is not None:
            # Only an unterminated last line is a torn write; a bad last line with its
            # newline was written whole, so it is an error like any other.
            if _file_ends_with_newline(path):
                raise _bad_line(path, pending) from None
            warnings.warn(
                f"{path}:{pending.lineno}: last line is incomplete (run killed mid-write?); dropped",
                TornLineWarning,
                stacklevel=3,
            )


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _bad_line(path: Path, exc: jsonlines.InvalidLineError) -> InputError:
    message = str(exc).rsplit(" (line", 1)[0]
    if message.startswith("line contains invalid json"):
        message = "invalid JSON" + message[len("line contains invalid json"):]
    elif message == "line contains null value":
        message = "expected a JSON object, got null"
    return InputError(path, message, exc.lineno)


def read_metrics(
    path: str | Path,
    *,
    default_step_key: str | None = None,
    exclusion: Exclusion | None = None,
) -> MetricsRun:
    """Read a metrics JSONL file.

    Raises ``InputError`` (``FILE:LINE: message``) for anything that is not a JSON object
    per line, an empty file, or a line whose step field is missing. A torn final line is
    dropped with a ``TornLineWarning``.
    """
    path = Path(path)
    exclusion = exclusion or Exclusion()
    series: dict[str, Series] = {}
    excluded: dict[str, str] = {}
    line_steps: list[Any] = []
    line_numbers = array("I")
    line_step_keys: list[str] = []
    step_keys: dict[str, None] = {}
    torn = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TornLineWarning)
        for lineno, obj in _iter_objects(path):
            step_key = obj.get("step_key", default_step_key)
            index = len(line_steps)
            if step_key is None:
                step_key = LINE_INDEX
                step = index
            else:
                if not isinstance(step_key, str):
                    raise InputError(path, f"step_key must be a string, got {step_key!r}", lineno)
                try:
                    step = obj[step_key]
                except KeyError:
                    raise InputError(path, f"step field {step_key!r} is missing", lineno) from None
            step_keys[step_key] = None
            line_steps.append(step)
            line_numbers.append(lineno)
            line_step_keys.append(step_key)
            for key, value in obj.items():
                entry = series.get(key)
                if entry is None:
                    if key == "step_key" or key == step_key:
                        continue
                    if key in excluded:
                        continue
                    reason = exclusion.reason(key)
                    if reason is not None:
                        excluded[key] = reason
                        continue
                    entry = series[key] = Series(key, step_key, order=len(series))
                entry.lines.append(index)
                values = entry.values
                if type(value) is not float and type(values) is array:
                    values = entry.values = values.tolist()
                values.append(value)
    for warning in caught:
        if issubclass(warning.category, TornLineWarning):
            torn = True
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if not line_steps:
        raise InputError(path, "empty metrics file (no JSON lines)", None)
    # A step key is never a series, also where another line carries it as a plain field.
    for key in step_keys:
        series.pop(key, None)
    return MetricsRun(
        path=str(path),
        series=series,
        line_steps=line_steps,
        line_numbers=line_numbers,
        line_step_keys=line_step_keys,
        step_keys=list(step_keys),
        excluded=dict(sorted(excluded.items())),
        torn_last_line=torn,
    )
