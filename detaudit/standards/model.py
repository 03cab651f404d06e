"""A standard in memory, whichever file format it came from, and the reading of a standard file.

The formats (``detaudit.standards.formats``) build and write a ``Standard``; this module knows
none of them. What a standard holds beyond its points is kept in named fields, so a
conversion can say what a target format would lose:

``comparison``  the rule ``verify`` compares a run by (a format name; None: the file's own format's)
``rename``      run series name -> standard series name, applied by ``verify``
``native``      what a foreign format carries beyond points: ``{"format": "megatron", "series":
                {...}, "extra": {...}, "layout": {...}}`` (``layout``: indent, final newline, key
                order, number spellings; byte layout, not information)
``meta``        miles' ``meta`` (commit, source, dropped_nan_series)
``name``, ``runner``, ``recorded``, ``excluded``, ``dropped``: detaudit's record of the recording

Reading: a standard file's text is bounded in size and UTF-8; its JSON may not name a key
twice in one object (Python's ``json``, and every framework's reader, keep the last one
silently), and numbers written in a non-canonical way (``0.00004`` for ``4e-05``) are
remembered, so a file is written back byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.data.json_keys import DuplicateKey, unique_pairs
from detaudit.data.number_tokens import exact_float, number_error
from detaudit.data.values import MAX_DEPTH
from detaudit.errors import InputError
from detaudit.fileio import read_bounded_text
from detaudit.runner_class import RunnerClass

# A standard holds a short run's metrics: megabytes. Reading stops here (bounded memory).
MAX_STANDARD_BYTES = 256 << 20
# The fields beyond the points, in the order reports name them.
FIELDS = ("comparison", "rename", "native", "meta", "name", "runner", "recorded", "excluded", "dropped")
# Of those, what only a detaudit file keeps: how the standard was recorded, by whom, where.
RECORD_KEEPING = ("name", "runner", "recorded", "excluded", "dropped")


@dataclass
class Standard:
    """A standard in memory, whichever format it came from (see the module doc for the fields)."""

    series: dict[str, SeriesData]
    format: str = "detaudit"
    name: str | None = None
    runner: dict[str, Any] = field(default_factory=dict)
    recorded: dict[str, Any] = field(default_factory=dict)
    excluded: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    comparison: str | None = None
    rename: dict[str, str] = field(default_factory=dict)
    native: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    # The file's text as read (None when built in memory): a conversion checks it is reproduced.
    source_text: str | None = field(default=None, repr=False, compare=False)

    @property
    def runner_class(self) -> RunnerClass | None:
        """The class it was recorded on (checked when the file was read), None when it names none."""
        cls = self.runner.get("class")
        return None if cls is None else RunnerClass.of(cls, self.path, "runner.class")

    def native_series(self, name: str) -> dict[str, Any]:
        """What the foreign format holds about one series beyond its points ({} when nothing)."""
        series = self.native.get("series")
        return series.get(name, {}) if isinstance(series, dict) else {}

    @property
    def layout(self) -> dict[str, Any]:
        layout = self.native.get("layout")
        return layout if isinstance(layout, dict) else {}


# --- reading -------------------------------------------------------------------------


def read_standard_text(path: str | Path) -> str:
    """A standard file's text: bounded in size, UTF-8, ``InputError`` naming the file otherwise."""
    return read_bounded_text(path, "standard", MAX_STANDARD_BYTES, missing="standard file not found")


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_COLON = re.compile(r"\s*:")


def duplicate_key(text: str) -> tuple[int, str] | None:
    """(line, key) of the first key an object of ``text`` names twice, in document order; None if none.

    Only called once a parse has found a duplicate, so its speed does not matter.
    """
    frames: list[set[str] | None] = []  # per open container: the keys seen (None for an array)
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            frames.append(set() if token == "{" else None)
        elif token in ("}", "]"):
            if frames:
                frames.pop()
        elif frames and frames[-1] is not None and _COLON.match(text, match.end()):
            key = json.loads(token)
            if key in frames[-1]:
                return text.count("\n", 0, match.start()) + 1, key
            frames[-1].add(key)
    return None


def parse_json_document(path: str | Path, text: str, spellings: dict[str, str] | None = None) -> Any:
    """JSON text of a standard, parsed; ``InputError`` for bad JSON, a key named twice in one
    object (with its line), deep nesting and over-long integers.

    ``spellings``, when given, collects floats written other than as Python's ``repr`` writes
    them (``{"4e-05": "0.00004"}``), so that a writer can spell them the same way again.
    """
    parse_float: Any = exact_float  # 1e-400 and 2e-400 would both read as 0.0: refused
    if spellings is not None:
        def parse_float(token: str) -> float:
            value = exact_float(token)
            canonical = repr(value)
            if canonical != token:
                spellings.setdefault(canonical, token)
            return value
    try:
        return json.loads(text, object_pairs_hook=unique_pairs, parse_float=parse_float)
    except DuplicateKey as dup:
        found = duplicate_key(text)  # the first in document order, with its line
        line, key = found if found is not None else (None, dup.key)
        raise InputError(path, f"duplicate key {key!r} in one JSON object (readers keep the last one silently; "
                               "name each key once)", line) from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise InputError(path, f"invalid standard: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit limit
        raise InputError(path, f"invalid JSON: {number_error(exc)}") from None
