"""The suite's own check: a test that starts Ray in the pytest process fails the session (conftest).

Ray leaves native threads in a process after ``ray.shutdown()``; a full run was seen to pass every
test and then segfault at interpreter exit. The check runs on a real pytest session in a
subprocess, with this suite's conftest and one test that starts Ray in-process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.ray]

IN_PROCESS = '''
def test_starts_ray_here():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False)
    ray.shutdown()


def test_starts_ray_in_a_subprocess():
    import subprocess, sys

    code = "import ray; ray.init(address='local', num_cpus=1, include_dashboard=False); ray.shutdown()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
'''


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_test_that_starts_ray_in_the_pytest_process_fails_the_session(tmp_path: Path, workers: list[str]) -> None:
    """Also under pytest-xdist (how the suite runs), where a worker's own exit status fails nothing."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_ray_here.py").write_text(IN_PROCESS)
    clean = run_pytest(tmp_path, "-k", "subprocess", *workers)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert "in-process Ray/gloo check" not in clean.stdout
    dirty = run_pytest(tmp_path, *workers)
    # 1 from the check (or a crash at exit, which is what the check is there to prevent)
    assert dirty.returncode != 0, dirty.stdout[-3000:] + dirty.stderr[-3000:]
    assert "2 passed" in dirty.stdout  # every test passed: only the session check fails
    assert ("in-process Ray/gloo check: test_ray_here.py::test_starts_ray_here started Ray in the pytest process "
            "(threads left: ") in dirty.stdout, dirty.stdout[-3000:]
