"""Standard files: reading, writing (atomically, never clobbering), and locking.

Two formats:

* ``detaudit/standard/1`` (ours)::

    {"schema": "detaudit/standard/1", "name": ..., "runner": {...}, "recorded": {...},
     "excluded": {...}, "dropped": {...},
     "series": {"train/loss": {"step_key": "train/step", "points": [[1.0, 0.25], ...]}}}

  Keys sorted, one point per line, so that a change reads well in review. Floats are
  written with ``repr`` (bit-exact round trip); NaN and the infinities as
  ``{"float": "NaN"}`` etc. (see ``detaudit.data.values``) so any JSON parser reads the file.

* miles_diffusion's, read and written as teams already have it::

    {"meta": {"commit": "...", "source": "..."}, "metrics": {"<series>": [[step, value], ...]}}

  with Python's NaN literals for non-finite values.
"""

from __future__ import annotations

import errno
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from detaudit.data.compare import SeriesData
from detaudit.data.values import (
    MAX_DEPTH,
    NONFINITE_KEY,
    decode_value,
    depth,
    encode_value,
)
from detaudit.errors import InputError, UsageError
from detaudit.fileio import make_parents, os_error, remove_empty
from detaudit.runner_class import RunnerClass

SCHEMA = "detaudit/standard/1"
FORMATS = ("detaudit", "miles")
# A standard holds a short run's metrics: megabytes. Reading stops here (bounded memory).
MAX_STANDARD_BYTES = 256 << 20


@dataclass
class Standard:
    """A standard in memory, whichever format it came from."""

    series: dict[str, SeriesData]
    format: str = "detaudit"
    name: str | None = None
    runner: dict[str, Any] = field(default_factory=dict)
    recorded: dict[str, Any] = field(default_factory=dict)
    excluded: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def runner_class(self) -> RunnerClass | None:
        """The class it was recorded on (checked when the file was read), None when it names none."""
        cls = self.runner.get("class")
        return None if cls is None else RunnerClass.of(cls, self.path, "runner.class")


def series_document(series: dict[str, SeriesData]) -> dict[str, Any]:
    """The ``series`` section: per name its step key and [step, value] points."""
    return {
        name: {
            "step_key": data.step_key,
            "points": [[encode_value(s), encode_value(v)] for s, v in zip(data.steps, data.values)],
        }
        for name, data in sorted(series.items())
    }


def render_standard(standard: Standard) -> str:
    """The file text of a standard in its format; the same input gives the same bytes."""
    if standard.format == "miles":
        doc: dict[str, Any] = {
            "meta": standard.meta,
            "metrics": {
                name: [[s, v] for s, v in zip(data.steps, data.values)]
                for name, data in sorted(standard.series.items())
            },
        }
        return _dump(doc, allow_nan=True) + "\n"
    doc = {
        "schema": SCHEMA,
        "name": standard.name,
        "runner": standard.runner,
        "recorded": standard.recorded,
        "excluded": standard.excluded,
        "series": series_document(standard.series),
    }
    if standard.dropped:
        doc["dropped"] = standard.dropped
    return _dump(doc, allow_nan=False) + "\n"


def _compact(value: Any, allow_nan: bool) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), allow_nan=allow_nan, ensure_ascii=False)


def _dump(value: Any, allow_nan: bool, depth: int = 0) -> str:
    # Sorted keys and one list element per line, but a point ([step, value]) or a list of
    # scalars stays on one line: diffs of a re-recorded standard then show the points.
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value and not _is_encoded_scalar(value):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dump(value[k], allow_nan, depth + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and any(isinstance(x, (list, dict)) and not _is_encoded_scalar(x) for x in value):
        items = [inner + (_compact(x, allow_nan) if _is_point(x) else _dump(x, allow_nan, depth + 1)) for x in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _compact(value, allow_nan)


def _is_encoded_scalar(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and NONFINITE_KEY in value


def _is_point(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(x, (list, dict)) or _is_encoded_scalar(x) for x in value)


# --- reading -------------------------------------------------------------------------


def read_standard_text(path: str | Path) -> str:
    """A standard file's text: bounded in size, UTF-8, ``InputError`` naming the file otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STANDARD_BYTES + 1)
    except FileNotFoundError:
        raise InputError(path, "standard file not found") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a standard file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read standard: {exc.strerror or exc}") from None
    if len(raw) > MAX_STANDARD_BYTES:
        raise InputError(path, f"standard is larger than {MAX_STANDARD_BYTES >> 20} MiB; not a standard")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "standard is not UTF-8") from None


def parse_json_document(path: str | Path, text: str) -> Any:
    """JSON text of a standard, parsed; deep nesting and over-long integers are ``InputError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise InputError(path, f"invalid standard: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit limit
        raise InputError(path, f"invalid JSON: {exc}") from None


def load_standard(path: str | Path) -> Standard:
    """Read a standard in either format; ``InputError`` names the file on any problem."""
    path = Path(path)
    doc = parse_json_document(path, read_standard_text(path))
    if not isinstance(doc, dict):
        raise InputError(path, "a standard must be a JSON object")
    if doc.get("schema") == SCHEMA:
        return _load_detaudit(path, doc)
    if "metrics" in doc:
        return _load_miles(path, doc)
    if "schema" in doc:
        raise InputError(path, f"unsupported standard schema {doc['schema']!r} (expected {SCHEMA!r})")
    raise InputError(path, 'not a standard: expected "schema" (detaudit) or "metrics" (miles) at the top level')


def _points(path: Path, name: str, points: Any) -> tuple[list[Any], list[Any]]:
    if not isinstance(points, list):
        raise InputError(path, f"series {name!r}: points must be a list of [step, value]")
    steps, values = [], []
    for i, point in enumerate(points):
        if not isinstance(point, list) or len(point) != 2:
            raise InputError(path, f"series {name!r}: point {i} must be [step, value]")
        if depth(point) > MAX_DEPTH:
            raise InputError(path, f"series {name!r}: point {i} is nested deeper than {MAX_DEPTH} levels")
        try:
            steps.append(decode_value(point[0]))
            values.append(decode_value(point[1]))
        except ValueError as exc:
            raise InputError(path, f"series {name!r}: point {i}: {exc}") from None
    return steps, values


def _load_detaudit(path: Path, doc: dict[str, Any]) -> Standard:
    series_doc = doc.get("series")
    if not isinstance(series_doc, dict):
        raise InputError(path, '"series" must be an object of series')
    series: dict[str, SeriesData] = {}
    for name, entry in series_doc.items():
        if not isinstance(entry, dict) or "points" not in entry:
            raise InputError(path, f"series {name!r}: expected an object with \"step_key\" and \"points\"")
        steps, values = _points(path, name, entry["points"])
        series[name] = SeriesData(name, str(entry.get("step_key", "")), steps, values)
    for key in ("runner", "recorded", "excluded", "dropped"):
        if key in doc and not isinstance(doc[key], dict):
            raise InputError(path, f'"{key}" must be an object')
    if "class" in doc.get("runner", {}):
        RunnerClass.of(doc["runner"]["class"], path, "runner.class")  # a class names files: checked here
    return Standard(
        series=series,
        format="detaudit",
        name=doc.get("name"),
        runner=doc.get("runner", {}),
        recorded=doc.get("recorded", {}),
        excluded=doc.get("excluded", {}),
        dropped=doc.get("dropped", {}),
        path=path,
    )


def _load_miles(path: Path, doc: dict[str, Any]) -> Standard:
    metrics = doc["metrics"]
    if not isinstance(metrics, dict):
        raise InputError(path, '"metrics" must be an object of series')
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(path, '"meta" must be an object')
    series = {}
    for name, points in metrics.items():
        steps, values = _points(path, name, points)
        series[name] = SeriesData(name, "", steps, values)
    return Standard(series=series, format="miles", meta=meta, path=path)


# --- the lock ----------------------------------------------------------------------------


@contextmanager
def standard_lock(path: str | Path) -> Iterator[Path]:
    """Hold ``PATH.lock`` while recording, so two records of one standard cannot race.

    A lock left by a process that no longer exists is taken over. Dirs created for the
    lock are removed again if nothing was written into them.
    """
    path = Path(path)
    lock = Path(str(path) + ".lock")
    created = make_parents(lock)
    try:
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _lock_holder(lock)
                if holder is not None and _alive(holder):
                    raise UsageError(
                        f"another 'detaudit record' of this standard is running (pid {holder}; lock {lock})", path
                    ) from None
                try:
                    lock.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise os_error(lock, exc, "remove a stale lock") from None
                continue
            except OSError as exc:
                raise os_error(lock, exc, "create the lock") from None
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
            break
        else:
            raise UsageError(f"could not take the lock {lock}", path)
    except BaseException:
        remove_empty(created)
        raise
    try:
        yield lock
    finally:
        try:
            if _lock_holder(lock) == os.getpid():
                lock.unlink()
        except FileNotFoundError:
            pass
        remove_empty(created)


def _lock_holder(lock: Path) -> int | None:
    try:
        return int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
