"""Shared by the scan-rng tests that write small trees of their own: write them, scan them."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from detaudit.scan import ScanConfig, scan

PYPROJECT = '[project]\nname = "demo"\n'


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Each file's text, dedented, at its path under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def write_project(root: Path, files: dict[str, str]) -> None:
    """The files, and a pyproject.toml that makes ``root`` a project's root (a whole-project scan)."""
    write_tree(root, {"pyproject.toml": PYPROJECT, **files})


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder as the current directory, with a cache of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def by_code(*paths: str, **config: Any) -> dict[str, Any]:
    """Findings keyed by the stripped code line (each test's draw lines are unique)."""
    result = scan(list(paths), ScanConfig(**config), use_cache=False)
    return {f.code: f for f in result.findings}


def entries(finding: Any) -> dict[str, bool | None]:
    """A finding's processes: entry -> seeded."""
    return {p["entry"]: p["seeded"] for p in finding.processes}
