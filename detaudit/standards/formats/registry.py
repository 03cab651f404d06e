"""The table of standard formats, and reading, writing and converting any standard through it.

Every module of this package that defines ``FORMAT`` (a ``common.Format``) is a format: the
table is found, not listed, so adding a format is one module (and its test). Ordered by
``Format.order``, the table gives the CLI's ``--format`` choices, the order in which a file's
content is recognised (never its name), each format's comparison rule (how ``verify`` compares
a run: the framework's own checker), whether its files hold a step's JSON type, and its byte
layout.

Conversions never change a standard silently: ``convert`` writes the target text, reads it
back, and refuses (``InputError``, nothing written) when anything the source holds did not
survive (points, Megatron-LM's "nan" cells, headers and top-level entries, miles' meta, a
rename map), or, converting a file to its own format or to detaudit, when the file's bytes
would not come back. What a target format cannot carry by design is said, not refused: each
format is verified by its own rule, and only a detaudit file keeps detaudit's record of the
recording (name, runner, recorded, excluded, dropped, step keys).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.compare import SeriesData
from detaudit.data.values import first_difference, format_value, same_value
from detaudit.errors import InputError, UsageError
from detaudit.fileio import write_atomic
from detaudit.standards.formats.common import NOT_JSON, Format, JsonLayout, Source, first_changed_line
from detaudit.standards.model import (
    FIELDS,
    RECORD_KEEPING,
    Standard,
    parse_json_document,
    read_standard_text,
)

DROPPED_NAN_KEY = "dropped_nan_series"  # meta: series left out by --drop-nan-series
DETAUDIT = "detaudit"


def _discover() -> tuple[Format, ...]:
    package = importlib.import_module(__package__ or "detaudit.standards.formats")
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        fmt = getattr(module, "FORMAT", None)
        if isinstance(fmt, Format):
            found.append(fmt)
    return tuple(sorted(found, key=lambda f: (f.order, f.name)))


TABLE: tuple[Format, ...] = _discover()
# Every format's name, in table order: the CLI's --format choices.
FORMAT_NAMES: tuple[str, ...] = tuple(f.name for f in TABLE)
_BY_NAME = {f.name: f for f in TABLE}


def format_of(name: str) -> Format:
    """The table's row for a format name (``UsageError`` naming the choices otherwise)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r} (one of {', '.join(FORMAT_NAMES)})") from None


def comparison_of(standard: Standard) -> Format:
    """The format whose rule ``verify`` compares a run with this standard by."""
    return _BY_NAME[standard.comparison or standard.format]


def _shapes() -> str:
    return ", ".join(f.shape for f in TABLE)


# --- reading -------------------------------------------------------------------------


def read_source(path: str | Path, text: str | None = None) -> Source:
    """A standard file's text and, when it is JSON, the parsed document (keys named once)."""
    text = read_standard_text(path) if text is None else text
    if not text.strip():
        raise InputError(path, "empty file: not a standard (no series)")
    if not text.lstrip().startswith(("{", "[")):
        return Source(text)
    spellings: dict[str, str] = {}
    try:
        doc = parse_json_document(path, text, spellings)
    except InputError:
        lines = metrics_lines(text)
        if lines:
            raise InputError(path, f"a metrics JSONL file ({lines} lines, one JSON object each), not a standard: "
                                   f"{FROM_METRICS_HINT}") from None
        raise
    return Source(text, doc, spellings)


# What a metrics file needs to become a standard (said where one is given instead of a standard).
FROM_METRICS_HINT = ("a standard holds what agreeing runs logged; make one from two or more agreeing metrics "
                     "files with `detaudit record --metrics A.jsonl B.jsonl --out STD.json`")


def metrics_lines(text: str) -> int:
    """How many lines of ``text`` are JSON objects, when every non-blank line is one and there are
    at least two (a metrics JSONL file); else 0."""
    count = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            if not isinstance(json.loads(line), dict):
                return 0
        except (ValueError, RecursionError):
            return 0
        count += 1
    return count if count >= 2 else 0


def _one_metrics_line(doc: Any) -> bool:
    """A JSON object of scalars alone, as one line of a metrics file (no standard holds that)."""
    return isinstance(doc, dict) and bool(doc) and all(not isinstance(v, (dict, list)) for v in doc.values())


def _detect(path: str | Path, source: Source) -> Format:
    for fmt in TABLE:
        if fmt.detect(source):
            return fmt
    for fmt in TABLE:
        reason = fmt.refuse(source)
        if reason:
            raise InputError(path, reason)
    if source.doc is not NOT_JSON and not isinstance(source.doc, dict):
        raise InputError(path, "a standard must be a JSON object")
    if source.doc == {}:
        raise InputError(path, "an empty JSON object: no series (a golden with no metrics proves nothing)")
    if _one_metrics_line(source.doc):
        raise InputError(path, f"one line of metrics (an object of numbers), not a standard: {FROM_METRICS_HINT}")
    raise InputError(path, f"not a standard: expected {_shapes()}")


def detect_format(path: str | Path, text: str | None = None) -> str:
    """The format of a standard file, from its content; ``InputError`` when it is none of them."""
    return _detect(path, read_source(path, text)).name


def _checked(path: str | Path, standard: Standard) -> Standard:
    """What a detaudit file says about other formats (its rule, their native data) is valid."""
    if standard.comparison is not None and standard.comparison not in _BY_NAME:
        raise InputError(path, f"comparison {standard.comparison!r} is not a format's rule (one of {', '.join(FORMAT_NAMES)})")
    if standard.native:
        owner = standard.native.get("format")
        if owner not in _BY_NAME or owner == DETAUDIT:
            raise InputError(path, f"native: \"format\" must name the foreign format it came from, got {owner!r}")
        fmt = _BY_NAME[owner]
        if fmt.check_native is not None:
            fmt.check_native(path, standard.native)
        else:
            JsonLayout.from_json(path, standard.native.get("layout", {}), JsonLayout())
    return standard


def load_source(path: str | Path, source: Source) -> Standard:
    return _checked(path, _detect(path, source).load(Path(path), source))


def load_any(path: str | Path) -> Standard:
    """Read a standard in any known format (detected from the content)."""
    return load_source(path, read_source(path))


# --- writing -------------------------------------------------------------------------


def _only(standard: Standard, series: str | None, target: str) -> Standard:
    if series is None:
        return standard
    if series not in standard.series:
        raise InputError(target, f"no series {series!r} in the standard")
    return dataclasses.replace(standard, series={series: standard.series[series]},
                               native=_native_of(standard, [series]), source_text=None)


def _native_of(standard: Standard, names: list[str]) -> dict[str, Any]:
    native = dict(standard.native)
    if isinstance(native.get("series"), dict):
        native["series"] = {n: info for n, info in native["series"].items() if n in names}
    return native


def _laid_out_like(standard: Standard, previous: Standard | None, fmt: str) -> Standard:
    # A re-recorded file keeps the previous file's byte layout (key order, indent, final newline).
    if previous is None or standard.native.get("format") == fmt or previous.native.get("format") != fmt:
        return standard
    layout = {k: v for k, v in previous.layout.items() if k != "spellings"}
    return dataclasses.replace(standard, native={"format": fmt, "layout": layout})


def render_as(standard: Standard, fmt: str, *, target: str | Path = "<output>", series: str | None = None,
              previous: Standard | None = None) -> str:
    """The file text of ``standard`` in format ``fmt``; exact, or ``InputError`` saying what cannot be held.

    ``previous``: the standard the file replaces; its byte layout is kept (a re-record then
    changes only what changed).
    """
    target = str(target)
    row = format_of(fmt)
    standard = _only(standard, series, target)
    if row.name == DETAUDIT:
        rule = standard.comparison or standard.format
        return row.render(dataclasses.replace(standard, format=DETAUDIT, comparison=rule), target)
    return row.render(_laid_out_like(standard, previous, fmt), target)


def write_as(path: str | Path, standard: Standard, fmt: str, *, overwrite: bool, series: str | None = None,
             previous: Standard | None = None) -> str:
    """Render and write atomically (never replacing an existing file without ``overwrite``)."""
    text = render_as(standard, fmt, target=path, series=series, previous=previous)
    write_atomic(path, text, overwrite=overwrite)
    return text


# --- converting -------------------------------------------------------------------------


@dataclass
class Conversion:
    """A conversion's text, and what the target holds differently (said, not silent)."""

    text: str
    fmt: str
    notes: list[str] = field(default_factory=list)


def _info_native(native: dict[str, Any]) -> dict[str, Any]:
    info = {k: v for k, v in native.items() if k not in ("layout", "format")}
    return {"format": native.get("format"), **info} if info else {}


def information(standard: Standard) -> dict[str, Any]:
    """What a standard holds beyond its points, field by field (byte layout aside)."""
    values = {name: getattr(standard, name) for name in FIELDS}
    values["comparison"] = comparison_of(standard).name
    values["native"] = _info_native(standard.native)
    return values


def _points_lost(source: Standard, back: Standard) -> list[str]:
    lost = []
    for name, data in source.series.items():
        got = back.series.get(name)
        if got is None:
            lost.append(f"series {name!r}")
            continue
        for i, (step, value) in enumerate(data.points()):
            if i >= len(got) or not (same_value(step, got.steps[i]) and same_value(value, got.values[i])):
                lost.append(f"series {name!r} exactly (step {format_value(step)}: {format_value(value)})")
                break
        else:
            if len(got) != len(data):
                lost.append(f"series {name!r} exactly ({len(data)} points, {len(got)} read back)")
    return lost


def _one_series_renamed(source: Standard, back: Standard, fmt: Format) -> tuple[str, str] | None:
    """(old, new) name of a format's one series that has a fixed name (TorchTitan's ``loss``)."""
    if fmt.holds_series == 1 and len(source.series) == 1 and len(back.series) == 1:
        (old,), (new,) = source.series, back.series
        if old != new:
            return old, new
    return None


def _fields_lost(source: Standard, back: Standard) -> tuple[list[str], list[str]]:
    """(lost: refuse, left behind: say) of the fields beyond the points."""
    old, new = information(source), information(back)

    def gone(name: str) -> bool:  # held by the source, not the same read back (NaN matches NaN)
        return bool(old[name]) and first_difference(old[name], new[name]) is not None

    lost, behind = [], []
    if gone("native"):
        owner = _BY_NAME[old["native"]["format"]]
        lost += owner.describe_native(source.native) or [f"{owner.title} data ({', '.join(old['native'])})"]
    if gone("meta"):
        lost.append(f"meta ({', '.join(map(str, old['meta']))})")
    if gone("rename"):
        lost.append(f"the rename map ({len(old['rename'])} series)")
    behind += [name for name in RECORD_KEEPING if gone(name)]
    steps = [n for n, data in source.series.items() if data.step_key and n in back.series
             and back.series[n].step_key != data.step_key]
    if steps:
        behind.append(f"step keys of {len(steps)} series")
    return lost, behind


def convert(standard: Standard, fmt: str, *, target: str | Path, series: str | None = None) -> Conversion:
    """``standard`` in format ``fmt``, checked by reading it back; ``InputError`` when anything would be lost."""
    target = str(target)
    text = render_as(standard, fmt, target=target, series=series)
    source = _only(standard, series, target)
    back = load_source(target, read_source(target, text))
    renamed = _one_series_renamed(source, back, format_of(fmt))
    if renamed:
        back = dataclasses.replace(back, series={name: SeriesData(name, data.step_key, data.steps, data.values)
                                                 for name, data in zip(source.series, back.series.values(), strict=False)})
    lost = _points_lost(source, back)
    more, behind = _fields_lost(source, back)
    lost += more
    if lost:
        raise InputError(target, f"{fmt} cannot hold {'; '.join(lost)}; nothing written")
    _check_bytes(source, fmt, text, back)
    notes = []
    old_rule, new_rule = comparison_of(source), comparison_of(back)
    if old_rule is not new_rule:
        notes.append(f"verified by {new_rule.name}'s rule from now on ({new_rule.rule}), not {old_rule.name}'s")
    if renamed:
        behind.insert(0, f"the series name {renamed[0]!r} (a {fmt} file's one series is {renamed[1]!r})")
    if behind:
        notes.append(f"not kept (a {fmt} file has no place for them): {', '.join(behind)}")
    return Conversion(text, fmt, notes)


def _check_bytes(source: Standard, fmt: str, text: str, back: Standard) -> None:
    """A file converted to its own format (detaudit's included), or to detaudit and back, must give its
    very bytes: a layout no writer of its format produces is refused, never rewritten silently."""
    original = source.source_text
    if original is None or fmt not in (source.format, DETAUDIT):
        return
    again = text if fmt == source.format else render_as(back, source.format, target=str(source.path))
    if again != original:
        line = first_changed_line(original, again)
        shown = original.split("\n")[line - 1][:60] if line <= original.count("\n") + 1 else ""
        raise InputError(source.path, f"the file's byte layout is not one detaudit reproduces (line {line} "
                                      f"{shown!r} would change); converting would lose it, nothing written", line)


def write_conversion(path: str | Path, conversion: Conversion, *, overwrite: bool) -> None:
    write_atomic(path, conversion.text, overwrite=overwrite, replace_flag="--overwrite")


# --- NaN series -------------------------------------------------------------------------


def _holds_nan(data: SeriesData) -> bool:
    return any(type(v) is float and math.isnan(v) for v in data.values)


def drop_nan_series(standard: Standard) -> list[str]:
    """Remove every series holding a NaN (for verifiers that compare with ``==``).

    Returns the dropped names and lists them in ``meta["dropped_nan_series"]``.
    """
    dropped = sorted(name for name, data in standard.series.items() if _holds_nan(data))
    for name in dropped:
        del standard.series[name]
    if dropped:
        standard.meta[DROPPED_NAN_KEY] = sorted(set(standard.meta.get(DROPPED_NAN_KEY, [])) | set(dropped))
        standard.native = _native_of(standard, list(standard.series))
        standard.source_text = None  # changed on purpose: its bytes are not the file's any more
    return dropped
