"""What every format module provides (``Format``), and the pieces several of them share: the
JSON byte layout of a file (indent, separators, final newline, number spellings) and a writer
that reproduces it, step keys, and the checks of what a format can hold.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.compare import PairDivergence, SeriesData
from detaudit.data.values import format_value
from detaudit.errors import InputError
from detaudit.standards.model import Standard

NOT_JSON: Any = object()  # Source.doc of a text that is not one JSON value


@dataclass
class Source:
    """A standard file as read: its text, its JSON (``NOT_JSON`` if none), non-canonical number spellings."""

    text: str
    doc: Any = NOT_JSON
    spellings: dict[str, str] = field(default_factory=dict)


# compare(expected, native series info, the run's series or None) -> the first divergence, or None
CompareFn = Callable[[SeriesData, dict[str, Any], "SeriesData | None"], "PairDivergence | None"]


@dataclass(frozen=True)
class Format:
    """One standard file format: the row of the registry table for it.

    ``comparison`` says how ``verify`` compares a run with a standard of this format (the
    framework's own checker, see docs/formats.md); a detaudit file may name another format's
    rule (``"comparison": "megatron"``) to keep the verdict of the file it was converted from.
    """

    name: str  # the --format choice, and the rule's name in a detaudit file's "comparison"
    title: str  # "Megatron-LM golden values"
    shape: str  # what a file looks like, for "not a standard: expected ..."
    order: int  # place among the CLI choices and in detection
    detect: Callable[[Source], bool]
    load: Callable[[Path, Source], Standard]
    render: Callable[[Standard, str], str]  # standard -> file text, or InputError naming what it cannot hold
    compare: CompareFn
    rule: str  # one line: how a run is compared (show, docs)
    holds_step_types: bool  # False where 1 and 1.0 are one step in the file (keys, text)
    holds_series: int | None = None  # how many series a file holds (None: any number)
    describe_native: Callable[[dict[str, Any]], list[str]] = lambda native: []
    check_native: Callable[[Path | str, dict[str, Any]], None] | None = None  # validates native carried by a detaudit file
    refuse: Callable[[Source], str | None] = lambda source: None  # a file of this framework that is no standard: why
    # A golden that samples the run at its own steps (Megatron-LM): the run's series taken at the
    # golden's steps, for an update that keeps them. None: the file holds every point of the run.
    sample_run: Callable[[SeriesData, dict[str, Any], SeriesData], SeriesData] | None = None
    # Series its framework checks only approximately (globs: Megatron-LM's wall-clock and memory
    # figures): left out of the exact comparison by the format's own rule, each listed with
    # ``approximate_reason``; ``verify --include`` takes one back.
    approximate_only: tuple[str, ...] = ()
    approximate_reason: str = ""


# --- JSON byte layout ------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonLayout:
    """How a JSON file's bytes are laid out, so that a writer reproduces them."""

    indent: int | None = None
    item_separator: str = ", "
    key_separator: str = ": "
    final_newline: bool = False
    ascii: bool = True
    spellings: dict[str, str] = field(default_factory=dict)  # repr(float) -> how the file spells it

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"indent": self.indent, "final_newline": self.final_newline}
        if self.indent is None:
            doc["separators"] = [self.item_separator, self.key_separator]
        if not self.ascii:
            doc["ascii"] = False
        if self.spellings:
            doc["spellings"] = dict(sorted(self.spellings.items()))
        return doc

    @classmethod
    def from_json(cls, path: Path | str, doc: Any, default: JsonLayout) -> JsonLayout:
        """A layout kept in a detaudit file's ``native.layout`` (``default`` for what it leaves out)."""
        if not isinstance(doc, dict):
            return default
        indent = doc.get("indent", default.indent)
        separators = doc.get("separators", [default.item_separator if indent is None else ",", default.key_separator])
        spellings = doc.get("spellings", {})
        ok = (
            (indent is None or type(indent) is int and 0 <= indent <= 16)
            and isinstance(separators, list) and len(separators) == 2
            and all(s in (",", ", ", ":", ": ") for s in separators)
            and type(doc.get("final_newline", default.final_newline)) is bool
            and isinstance(spellings, dict) and all(_spelling_ok(k, v) for k, v in spellings.items())
        )
        if not ok:
            raise InputError(path, "native.layout: not a layout (indent, separators, final_newline, spellings)")
        return cls(indent, separators[0], separators[1], doc.get("final_newline", default.final_newline),
                   doc.get("ascii", True) is not False, dict(spellings))


def _spelling_ok(canonical: Any, spelled: Any) -> bool:
    try:
        return isinstance(canonical, str) and isinstance(spelled, str) and repr(float(spelled)) == canonical
    except ValueError:
        return False


def detect_layout(text: str, spellings: dict[str, str]) -> JsonLayout:
    """The layout of a JSON file written by Python's ``json.dumps`` with some options.

    A file laid out otherwise is not reproduced; ``registry.convert`` then refuses to convert
    it, naming the first line that would change.
    """
    final_newline = text.endswith("\n")
    body = text[:-1] if final_newline else text
    if "\n" in body:
        second = body.split("\n", 2)[1]
        indent: int | None = len(second) - len(second.lstrip(" "))
        item, key = ",", ": "
    else:
        indent = None
        item = "," if ("," in body and ", " not in body) else ", "
        key = ":" if ('":' in body and '": ' not in body) else ": "
    return JsonLayout(indent, item, key, final_newline, body.isascii(), dict(spellings))


def dump_json(doc: Any, layout: JsonLayout, *, allow_nan: bool) -> str:
    """``doc`` as ``json.dumps`` writes it with ``layout``'s options, numbers spelled as the layout says."""
    if not layout.spellings:
        text = json.dumps(doc, indent=layout.indent, separators=(layout.item_separator, layout.key_separator),
                          ensure_ascii=layout.ascii, allow_nan=allow_nan)
    else:
        parts: list[str] = []
        _emit(doc, layout, allow_nan, 0, parts)
        text = "".join(parts)
    return text + ("\n" if layout.final_newline else "")


def _emit(value: Any, layout: JsonLayout, allow_nan: bool, level: int, out: list[str]) -> None:
    # The same bytes as json.dumps (checked by the tests), with a float spelled as the file spelled it.
    if type(value) is float:
        if math.isfinite(value):
            text = repr(value)
            out.append(layout.spellings.get(text, text))
        elif not allow_nan:
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        else:
            out.append("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))
        return
    if isinstance(value, (dict, list)):
        if not value:
            out.append("{}" if isinstance(value, dict) else "[]")
            return
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        if layout.indent is None:
            inner, separator, end = "", layout.item_separator, ""
        else:
            inner = "\n" + " " * (layout.indent * (level + 1))
            separator = layout.item_separator + inner
            end = "\n" + " " * (layout.indent * level)
        out.append(opening + inner)
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for i, (key, item) in enumerate(items):
            if i:
                out.append(separator)
            if key is not None:
                out.append(json.dumps(key, ensure_ascii=layout.ascii) + layout.key_separator)
            _emit(item, layout, allow_nan, level + 1, out)
        out.append(end + closing)
        return
    out.append(json.dumps(value, ensure_ascii=layout.ascii))


def first_changed_line(old: str, new: str) -> int:
    """The 1-based line where two texts first differ."""
    for number, (a, b) in enumerate(zip(old.split("\n"), new.split("\n"), strict=False), 1):
        if a != b:
            return number
    return min(old.count("\n"), new.count("\n")) + 1


# --- steps and values ----------------------------------------------------------------------------


_INT_KEY = re.compile(r"-?(0|[1-9][0-9]*)\Z")


def int_step_key(path: Path, series: str, key: Any) -> int:
    """A JSON object key that must be the decimal form of an integer step ("12", not "12.0" or "012")."""
    if not isinstance(key, str) or not _INT_KEY.match(key):
        raise InputError(path, f"series {series!r}: step {key!r} is not an integer in canonical form")
    return int(key)


def is_number(value: Any) -> bool:
    return type(value) in (int, float)


def require_int_steps(target: str, fmt: str, data: SeriesData) -> None:
    """Fail unless every step is a plain int, increasing (the format keys points by step, in order)."""
    previous: int | None = None
    for step in data.steps:
        if type(step) is not int:
            raise InputError(
                target,
                f"{fmt} cannot hold series {data.name!r} exactly: step {format_value(step)} is a "
                f"{type(step).__name__}, and {fmt} keys points by integer step",
            )
        if previous is not None and step <= previous:
            raise InputError(
                target, f"{fmt} cannot hold series {data.name!r}: step {step} follows step {previous} (steps must increase)"
            )
        previous = step


def require_number(target: str, fmt: str, name: str, step: Any, value: Any, *, nonfinite: bool) -> None:
    """Fail unless ``value`` is an int or float the format can write (``nonfinite``: NaN/±inf too)."""
    if not is_number(value):
        raise InputError(
            target,
            f"{fmt} cannot hold series {name!r} at step {format_value(step)}: "
            f"value {format_value(value)} is not a number",
        )
    if not nonfinite and type(value) is float and not math.isfinite(value):
        why = (
            "it writes \"nan\" for a step it did not log, so a NaN value would read back as not logged"
            if value != value
            else "JSON has no literal for infinity"
        )
        raise InputError(
            target, f"{fmt} cannot hold series {name!r} at step {format_value(step)}: value {format_value(value)} ({why})"
        )


def last_by_step(actual: SeriesData) -> dict[Any, tuple[int, Any]]:
    """The run's points keyed by numeric step: (index, value) of the last point at each step.

    Frameworks that read a run into a dict by step (Megatron-LM, TorchTitan) keep the last one.
    """
    out: dict[Any, tuple[int, Any]] = {}
    for index, (step, value) in enumerate(actual.points()):
        out[step] = (index, value)
    return out
