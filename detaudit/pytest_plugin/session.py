"""What the pytest plugin keeps for a session: its events (updates, new series, the standards
checked), the update claims shared by xdist workers, the probed environment, the extra runs of a
test that an update records from, and which standards no test checked.

An update records a metrics test's standard from ``--detaudit-runs N`` agreeing runs: the run in
this process and N-1 runs of the same test in fresh pytest processes (``collect_runs``), each in
*collect* mode, where the test's metrics file is copied out instead of checked. Fresh processes,
as ``detaudit record`` uses for a card: a global RNG nobody seeded shows up as a disagreement.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from detaudit.runner_class import RunnerClass

STANDARDS_DIR_INI = "detaudit_standards_dir"
COLLECT_OPTION = "--detaudit-collect"  # hidden: the folder a collect-mode run copies its metrics to
OUTPUT_TAIL_LINES = 15


@dataclasses.dataclass
class SessionState:
    events: list[dict[str, str]] = dataclasses.field(default_factory=list)
    claims: Path | None = None  # set under an update option
    own_claims: bool = False  # this process made the folder (the controller): it removes it
    environment: dict[str, Any] | None = None  # this interpreter's probe, once per process
    runner_class: RunnerClass | None = None
    partial: bool = False  # tests selected by node id, -k or -m: unused standards are not judged


STATE = pytest.StashKey[SessionState]()


def probe_here(state: SessionState) -> tuple[dict[str, Any], RunnerClass]:
    """This interpreter's environment and CPU runner class (the test's metrics were made here), probed once."""
    if state.environment is None or state.runner_class is None:
        from detaudit.env.provenance import detect_environment, runner_class

        state.environment = detect_environment(python=sys.executable)
        state.runner_class = runner_class(state.environment, 0)
    return state.environment, state.runner_class


def collect_runs(config: pytest.Config, item: pytest.Item, count: int, call: int) -> list[Path]:
    """Run ``item`` ``count`` more times, each in a fresh pytest process in collect mode; the metrics
    file of its ``call``-th check from each. A run that fails, or writes no metrics, fails the test."""
    holder = Path(tempfile.mkdtemp(prefix="detaudit-runs-"))
    files = []
    for run in range(count):
        folder = holder / f"run{run + 2}"
        folder.mkdir()
        proc = subprocess.run(_child_argv(config, item, folder), cwd=config.invocation_params.dir,
                              capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
        metrics = folder / f"{call}.jsonl"
        if proc.returncode != 0 or not metrics.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-OUTPUT_TAIL_LINES:])
            shutil.rmtree(holder, ignore_errors=True)
            why = f"exit {proc.returncode}" if proc.returncode != 0 else "it wrote no metrics"
            raise RunFailed(f"run {run + 2} of {item.nodeid} (a fresh pytest process) failed ({why}); "
                            f"no standard written\n{tail}")
        files.append(metrics)
    return files


class RunFailed(Exception):
    """An extra run of a test, for a standard from agreeing runs, did not finish."""


def _child_argv(config: pytest.Config, item: pytest.Item, folder: Path) -> list[str]:
    """pytest for this one test, with what the session was given that changes how it runs."""
    rest = item.nodeid.partition("::")[2]
    target = str(item.path) + ("::" + rest if rest else "")
    argv = [sys.executable, "-m", "pytest", target, "-q", "-p", "no:cacheprovider", "--rootdir", str(config.rootpath),
            COLLECT_OPTION, str(folder)]
    if config.inipath is not None:
        argv += ["-c", str(config.inipath)]
    if config.pluginmanager.get_plugin("detaudit") is None:  # loaded with -p here, not by its entry point
        argv += ["-p", "detaudit.pytest_plugin"]
    if config.pluginmanager.hasplugin("xdist"):
        argv += ["-n", "0"]
    args = list(config.invocation_params.args)
    for i, arg in enumerate(args):  # ini overrides, plugins and the import mode
        if arg in ("-o", "--override-ini", "-p", "--import-mode") and i + 1 < len(args) \
                and args[i + 1] not in ("detaudit.pytest_plugin", "xdist"):
            argv += [arg, args[i + 1]]
        elif arg.startswith(("--override-ini=", "--import-mode=")):
            argv.append(arg)
    return argv


def copy_collected(folder: Path, call: int, metrics: Path) -> None:
    """Collect mode: the metrics file of the test's ``call``-th check, copied out for the session that asked."""
    shutil.copyfile(metrics, folder / f"{call}.jsonl")


def selection_is_partial(config: pytest.Config) -> bool:
    """Tests chosen by node id, keyword or marker: standards of tests left out are not unused."""
    option = config.option
    return (any("::" in str(a) for a in config.invocation_params.args)
            or bool(getattr(option, "keyword", "")) or bool(getattr(option, "markexpr", ""))
            or bool(getattr(option, "lf", False)) or bool(getattr(option, "deselect", None)))


def module_folders(items: list[pytest.Item], standards_dir: str) -> tuple[set[Path], set[Path]]:
    """The default standards folders of the collected test modules (and of deleted modules beside them),
    and the default standard of every collected test: what an unused-standards check looks at."""
    from detaudit.standards.store import standard_of_test, standards_folder_of_module

    folders: set[Path] = set()
    owners: set[Path] = set()
    for item in items:
        test_file = Path(item.path)
        folder = standards_folder_of_module(test_file, standards_dir)
        owners.add(standard_of_test(test_file, item.name, standards_dir))
        folders.add(folder)
        parent = folder.parent
        if parent.is_dir():
            for sub in parent.iterdir():
                if sub.is_dir() and not (test_file.parent / f"{sub.name}.py").exists():
                    folders.add(sub)  # its test module is gone: every standard in it is unused
    return folders, owners


def remove_file(path: Path) -> str | None:
    """Remove an unused standard (and its module's folder, when that leaves it empty); the reason when it cannot be."""
    try:
        os.unlink(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        path.parent.rmdir()  # only when empty: a folder holding anything else stays
    except OSError:
        pass
    return None
