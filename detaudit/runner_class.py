"""The runner class: the machine kind a standard holds on (``cpu-intel-6.207-avx512``, ``h200-1gpu``).

It is the one place that builds, parses and checks a class and the standard file name that
carries it. Parts come from the environment probe, from cards (``runner = [...]``), from
standard files and from Ray jobs on other machines; every one of those goes through
:meth:`RunnerClass.of`, so no part can hold a path separator, a ``..`` or a ``-`` (the
separator) and a class can never steer a file name out of the standards folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.errors import InputError

SEPARATOR = "-"
# A part is a short token of letters, digits, '.', '_', '+' and '-', starting with a letter or digit
# ("intel-6.207", "avx512", "1gpu"): no '/', '\\', NUL, space or leading dot, so no part can make a
# path. Parts may hold the separator, so two classes are the same when their text is.
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z")
MAX_PARTS = 16


def check_plain_name(value: object, what: str, source: str | Path | None = None) -> str:
    """``value`` as a plain file-name part (a card name, a class part): ``InputError`` otherwise.

    Plain: a non-empty string with no path separator, NUL or leading dot, so it can never
    name a file outside the folder it is joined to.
    """
    if (not isinstance(value, str) or not value or value in (".", "..") or value.startswith(".")
            or any(c in value for c in "/\\\0")):
        raise InputError(source, f"{what} must be a plain file name (no path separators, not empty, no leading dot), "
                                 f"got {value!r}")
    return value


@dataclass(frozen=True, eq=False)
class RunnerClass:
    """An ordered tuple of checked parts; ``str()`` joins them with ``-``, and equality is by that text."""

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.parts or len(self.parts) > MAX_PARTS:
            raise ValueError(f"a runner class has 1 to {MAX_PARTS} parts, got {len(self.parts)}")
        for part in self.parts:
            if not isinstance(part, str) or not _PART.match(part):
                raise ValueError(f"runner class part {part!r} is not a plain token (letters, digits, '.', '_', '+', '-')")

    @classmethod
    def of(cls, parts: Any, source: str | Path | None = None, what: str = "runner class") -> RunnerClass:
        """A class from parts read anywhere (a card, a standard, a job's result); ``InputError`` naming
        ``source`` when they are not a non-empty list of plain tokens."""
        if isinstance(parts, RunnerClass):
            return parts
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
            raise InputError(source, f"{what} must be a list of strings, got {type(parts).__name__} {parts!r:.80}")
        try:
            return cls(tuple(parts))
        except ValueError as exc:
            raise InputError(source, f"{what}: {exc}") from None

    @classmethod
    def parse(cls, text: str, source: str | Path | None = None) -> RunnerClass:
        """``"cpu-intel-6.207-avx512"`` -> the class (``InputError`` when a part is not plain)."""
        return cls.of(text.split(SEPARATOR), source)

    def __str__(self) -> str:
        return SEPARATOR.join(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunnerClass) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: RunnerClass) -> bool:
        return str(self) < str(other)

    def __iter__(self) -> Iterator[str]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def to_json(self) -> list[str]:
        return list(self.parts)

    def standard_file_name(self, card_name: str) -> str:
        """``<card name>.<class>.json``: the one spelling of a standard's file name."""
        return f"{check_plain_name(card_name, 'card name')}.{self}.json"


def class_text(cls: RunnerClass | None) -> str:
    """A class for people ("unknown" when there is none)."""
    return str(cls) if cls is not None else "unknown"
