"""Where standards live: the one place that names and finds standard files.

A card's standards are ``<standards_dir>/<name>.<runner class>.json`` (``standards_dir`` resolved
against the card's project root, ``Card.standards_path``); a card with an ``[approximate]`` table
for a class is checked against the standard of the class it names. A pytest test's standard lies
beside its test file, ``<test folder>/<standards_dir>/<test module>/<test name>.json``; a test
name too long for a file name is cut and completed with a hash of the whole name. What a failed
check obtained is written beside its standard as ``<standard stem>.obtained.<ext>``.
"""

from __future__ import annotations

import glob
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from detaudit.data.card import Card
from detaudit.errors import InputError
from detaudit.runner_class import RunnerClass
from detaudit.standards.standard import Standard, load_standard

OBTAINED = ".obtained"
# Characters a test name keeps in its file name (pytest ids hold brackets, '=', ',', '-').
_UNSAFE_NAME = re.compile(r"[^\w.\[\]=,+-]")
# 255 bytes is the usual file-name limit; leave room for ".obtained.jsonl", a lock's ".lock" and temp suffixes.
MAX_NAME_BYTES = 160
_HASH_CHARS = 16


def standard_file_name(card: Card, runner_class: RunnerClass) -> str:
    """``<name>.<runner class>.json``."""
    return runner_class.standard_file_name(card.name)


def standard_path(card: Card, runner_class: RunnerClass) -> Path:
    """``<standards_dir>/<name>.<runner class>.json``, the dir resolved as ``Card.standards_path`` says."""
    return card.standards_path / standard_file_name(card, runner_class)


def approximate_standard_path(card: Card, against: str) -> Path:
    """The standard an ``[approximate."CLASS"]`` table checks CLASS against: the one of class ``against``."""
    return card.standards_path / f"{card.name}.{against}.json"


def standards_of_card(card: Card) -> list[tuple[Path, Standard]]:
    """The standards of this card for any runner class, by exact name.

    Files are found as ``<standards_dir>/<name>.*.json`` and kept only when the standard
    inside names this card (so card ``ok`` never takes ``ok.v2.h200-1gpu.json``, the
    standard of card ``ok.v2``). Files that do not load, and miles-format files (they carry
    no name), are left out.
    """
    found = []
    for path in sorted(card.standards_path.glob(f"{glob.escape(card.name)}.*.json")):
        try:
            std = load_standard(path)
            cls = std.runner_class
        except InputError:
            continue
        if std.name == card.name and cls is not None and path.name == standard_file_name(card, cls):
            found.append((path, std))
    return found


def file_name_of_test(test_name: str, suffix: str = ".json") -> str:
    """A test's standard file name: its name with unsafe characters replaced; a name longer than
    ``MAX_NAME_BYTES`` is cut and ends with a hash of the whole name, so two long names that share
    their start still get two files."""
    safe = _UNSAFE_NAME.sub("_", test_name)
    if len(safe.encode()) <= MAX_NAME_BYTES:
        return safe + suffix
    digest = hashlib.sha256(test_name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    head = safe.encode()[: MAX_NAME_BYTES - _HASH_CHARS - 1].decode("utf-8", "ignore")
    return f"{head}-{digest}{suffix}"


def standards_folder_of_module(test_file: Path, standards_dir: str | Path) -> Path:
    """The folder of one test module's default standards: ``<test folder>/<standards_dir>/<module>``."""
    return test_file.parent / Path(standards_dir) / test_file.stem


def standard_of_test(test_file: Path, test_name: str, standards_dir: str | Path) -> Path:
    """A test's default standard: ``<test folder>/<standards_dir>/<test module>/<test name>.json``."""
    return standards_folder_of_module(test_file, standards_dir) / file_name_of_test(test_name)


def obtained_path(standard: Path, suffix: str) -> Path:
    """Where a failed check's obtained output goes: ``<standard stem>.obtained<suffix>``, beside it."""
    return standard.with_name(f"{standard.stem}{OBTAINED}{suffix}")


def is_obtained(path: Path) -> bool:
    return path.stem.endswith(OBTAINED)


def unused_standards(folders: Iterable[Path], used: set[Path], owners: set[Path]) -> list[Path]:
    """Standard files in ``folders`` that no test checked (``used``) and that no collected test
    would check by default (``owners``: default paths of tests that did not reach their check).
    Obtained outputs and locks are not standards."""
    seen = {p.resolve() for p in used} | {p.resolve() for p in owners}
    found = []
    for folder in sorted(set(folders)):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            if path.is_file() and not is_obtained(path) and path.resolve() not in seen:
                found.append(path)
    return found
