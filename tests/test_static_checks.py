"""The static checks (settings in pyproject.toml): ruff's lint of the package, the recipes and the
benchmarks, and mypy's types of the package.

They run with the suite rather than before it, so that mypy's ~40 s of one core (a fresh clone has no
cache) overlap the other tests instead of delaying them (docs/testing.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO


def check(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=900,
                          check=False)


def test_the_package_the_recipes_and_the_benchmarks_pass_ruff() -> None:
    proc = check("ruff", "check", "detaudit", "recipes", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # ~40 s of one core from a fresh clone
def test_the_package_passes_mypy() -> None:
    proc = check("mypy", "detaudit")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout
