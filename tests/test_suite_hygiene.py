"""The suite's own machinery (tests/conftest.py), each on a real pytest session in a subprocess with
this suite's conftest: the check that a test which starts Ray in the pytest process fails the
session; ``made_once``, the work shared between tests and xdist workers; the order tests run in.

Ray leaves native threads in a process after ``ray.shutdown()``; a full run was seen to pass every
test and then segfault at interpreter exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, card_text, given_toy_standard, write_card

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


def run_pytest(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.slow
@pytest.mark.ray
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


SHARED = """
import os, time
import pytest
from conftest import made_once


@pytest.fixture(scope="session")
def shared(request):
    def make(folder):
        time.sleep(1)  # long enough for the other worker to ask meanwhile
        with open(os.environ["MADE_LOG"], "a") as log:
            log.write("made\\n")
        (folder / "value").write_text("42")
    return made_once(request, "shared", make)


@pytest.fixture(scope="session")
def broken(request):
    def make(folder):
        with open(os.environ["MADE_LOG"], "a") as log:
            log.write("tried\\n")
        raise RuntimeError("the recording failed")
    return made_once(request, "broken", make)


@pytest.mark.parametrize("i", range(4))
def test_reads(shared, i):
    assert (shared / "value").read_text() == "42"


@pytest.mark.parametrize("i", range(4))
def test_broken(broken, i):
    pass
"""


@pytest.mark.slow  # two pytest sessions of two xdist workers each
def test_made_once_is_made_once_per_session_whatever_the_workers_and_a_failure_fails_every_ask(
        tmp_path: Path) -> None:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_shared.py").write_text(SHARED)
    for workers in (["-n", "2"], ["-n", "0"]):
        log = tmp_path / f"made-n{workers[1]}.log"
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE", *workers],
                                cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env={**os.environ, "MADE_LOG": str(log)})
        assert "4 passed, 4 errors" in result.stdout, result.stdout[-3000:]
        assert log.read_text() == "made\ntried\n" or log.read_text() == "tried\nmade\n", log.read_text()
        assert result.stdout.count("RuntimeError: the recording failed") >= 1, result.stdout[-3000:]
        errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR test_shared.py::test_broken")]
        assert len(errors) == 4, result.stdout[-3000:]


COLLECTED = """
import pytest

def test_fast():
    pass

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.slow
@pytest.mark.recipe
def test_recipe():
    pass

@pytest.mark.recipe
def test_fast_recipe_helper():
    pass

@pytest.mark.slow
@pytest.mark.ray
def test_ray():
    pass
"""


def test_slow_recipe_and_ray_tests_run_first_and_fast_ones_last(tmp_path: Path) -> None:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_order.py").write_text(COLLECTED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow\n    ray\n    recipe\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                             "--collect-only"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    order = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert order == ["test_recipe", "test_ray", "test_slow", "test_fast", "test_fast_recipe_helper"], result.stdout


def test_fast_files_with_more_tests_start_first_and_slow_parts_keep_file_order(tmp_path: Path) -> None:
    """Under xdist the fast part's last files decide how long one worker waits for the other at the
    end: the fast files with the most fast tests go first, the one-test files last."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_a_few.py").write_text("def test_few():\n    pass\n")
    (tmp_path / "test_order.py").write_text(COLLECTED)
    (tmp_path / "test_z_many.py").write_text("import pytest\n\n\n@pytest.mark.parametrize('i', range(3))\n"
                                             "def test_many(i):\n    pass\n\n\n@pytest.mark.slow\n"
                                             "def test_z_slow():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow\n    ray\n    recipe\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                             "--collect-only"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    order = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert order == ["test_recipe", "test_ray", "test_slow", "test_z_slow", "test_many[0]", "test_many[1]",
                     "test_many[2]", "test_fast", "test_fast_recipe_helper", "test_few"], result.stdout


MANY_FAST = """
import os, time
import pytest


@pytest.mark.parametrize("i", range(8))
def test_fast(i):
    with open("started.txt", "a") as fh:
        fh.write(os.environ["PYTEST_XDIST_WORKER"] + " " + __name__ + "\\n")
    time.sleep(0.1)
"""

ONE_RECIPE = """
import os
import pytest


@pytest.mark.slow
@pytest.mark.recipe
def test_recipe():
    with open("started.txt", "a") as fh:
        fh.write(os.environ["PYTEST_XDIST_WORKER"] + " " + __name__ + "\\n")
"""


@pytest.mark.slow  # a pytest session of two xdist workers
def test_under_the_suites_xdist_options_the_file_of_a_recipe_test_starts_first(tmp_path: Path) -> None:
    """conftest puts the recipe and Ray tests first; the suite's xdist options must keep that order
    of files. (pytest-xdist's default --loadscope-reorder sends the files with the most tests first:
    the suite's few-test recipe files then started last, and one worker idled for minutes.)"""
    import shlex
    import tomllib

    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow\n    ray\n    recipe\n")
    for name in ("test_a_many", "test_b_many"):
        (tmp_path / f"{name}.py").write_text(MANY_FAST)
    (tmp_path / "test_z_recipe.py").write_text(ONE_RECIPE)
    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    xdist = [a for a in shlex.split(addopts) if a not in ("-ra",) and not a.startswith("--durations")]
    done = run_pytest(tmp_path, *xdist)
    assert done.returncode == 0, done.stdout + done.stderr
    started = [line.split()[1] for line in (tmp_path / "started.txt").read_text().splitlines()]
    assert len(started) == 17 and "test_z_recipe" in started[:2], started


def test_given_toy_standard_refuses_a_card_that_is_not_the_default_toy_card(tmp_path: Path) -> None:
    other = write_card(tmp_path / "toy.toml", args=["--steps", "4"])  # other series than the shared standard's
    with pytest.raises(AssertionError, match="not the default toy card"):
        given_toy_standard(other, tmp_path / "unused.json")
    assert not (tmp_path / "standards").exists()
    assert card_text(tmp_path / "toy.toml") != other.read_text()


ONE_FILE = '''
import os, time
import pytest


@pytest.mark.parametrize("i", range(6))
def test_notes_its_worker(i):
    time.sleep(0.2)  # long enough that a free worker would take the next test of the file
    with open("workers.txt", "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
'''


@pytest.mark.slow  # a pytest session of two xdist workers
def test_the_tests_of_one_file_run_on_one_worker(tmp_path: Path) -> None:
    """The suite's xdist options (pyproject's addopts) keep a file's tests on one worker: test_cluster.py's
    module-scoped Ray head must be one head, not one per worker (`--dist loadgroup` did not group)."""
    import shlex
    import tomllib

    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    xdist = [a for a in shlex.split(addopts) if a not in ("-ra",) and not a.startswith("--durations")]
    assert "-n" in xdist, addopts
    (tmp_path / "test_one_file.py").write_text(ONE_FILE)
    done = run_pytest(tmp_path, *xdist, "test_one_file.py")
    assert done.returncode == 0, done.stdout + done.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1 and workers[0].startswith("gw"), workers


LEAVES_A_WORKDIR = '''
import json, os, subprocess, sys


def test_keeps_a_workdir_as_a_failing_run_does():
    made = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp(prefix='kept-'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open("seen.json", "w") as fh:
        json.dump({"made": made, "tmpdir": os.environ["TMPDIR"],
                   "inductor": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}, fh)
'''


def test_the_session_keeps_its_temporary_files_in_one_folder_and_removes_it(tmp_path: Path) -> None:
    """The workdirs failing runs keep and Ray's session folders went to /tmp and stayed there (~40 and
    ~37 a run of the suite). The session's TMPDIR is one short folder under /tmp, inherited by xdist's
    workers and their subprocesses, removed at the end; Inductor's cache stays at its usual place."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaves.py").write_text(LEAVES_A_WORKDIR)
    env = {k: v for k, v in os.environ.items() if k not in ("DETAUDIT_SUITE_TMP", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}
    done = run_pytest(tmp_path, "-n", "2", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    session = Path(seen["tmpdir"])
    assert session.parent == Path("/tmp") and session.name.startswith("dts-"), seen
    assert Path(seen["made"]).parent == session, seen
    assert not session.exists(), f"{session} is still there after the session"
    assert seen["inductor"] is not None and Path(seen["inductor"]).parent == Path("/tmp"), seen
    assert Path(seen["inductor"]).name.startswith("torchinductor_"), seen
