"""Shared helpers: run the detaudit CLI in a subprocess, write cards for the toy recipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "recipes" / "toy_recipe.py"


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None) -> Result:
    """Run `python -m detaudit ARGS` (the installed package) and capture everything."""
    full_env = dict(os.environ, COLUMNS="200")
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "detaudit", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def write_card(path: Path, *, name: str = "toy", args: list[str] | None = None, extra: str = "") -> Path:
    command = json.dumps(["{python}", str(TOY), *(args or [])])
    path.write_text(
        f'name = "{name}"\ncommand = {command}\ntimeout_s = 60\nrunner = ["cpu", "test"]\n'
        f'standards_dir = "{path.parent / "standards"}"\n{extra}'
    )
    return path


def scan_tree_copy(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of a scan fixture tree as the cwd, with its own scan cache: tests may edit it."""
    shutil.copytree(source, tmp_path / "proj")
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "proj"


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def toy_card(tmp_path: Path) -> Path:
    return write_card(tmp_path / "toy.toml")
