"""One folder put in place of another (a standard's saved trace, its compile artifacts): the
new folder whole, the old one gone, nothing hidden left beside them; and the umask read back
unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from detaudit.fileio import replace_folder, umask


def _folder(path: Path, **files: str) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_a_staged_folder_replaces_the_old_one_whole(tmp_path: Path) -> None:
    destination = _folder(tmp_path / "card.trace", old="1", gone="2")
    staged = _folder(tmp_path / ".card.trace.new", new="3")
    replace_folder(staged, destination)
    assert _contents(destination) == {"new": "3"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.trace"]  # no staged or retired folder left


def test_a_staged_folder_where_none_was_and_none_staged_removes_the_old(tmp_path: Path) -> None:
    destination = tmp_path / "card.trace"
    replace_folder(_folder(tmp_path / ".staged", a="1"), destination)
    assert _contents(destination) == {"a": "1"}
    replace_folder(None, destination)
    assert list(tmp_path.iterdir()) == []


def test_the_umask_is_read_and_left_as_it_was() -> None:
    before = os.umask(0o027)
    try:
        assert umask() == 0o027
        assert umask() == 0o027  # reading it did not change it
    finally:
        os.umask(before)
