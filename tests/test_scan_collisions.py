"""scan-rng never drops a file whose module name another scanned file shares (issue #23).

tests/fixtures/scan_collisions holds two projects with the same package (`core`) and the same
top-level script modules (`scripts/train.py`, `scripts/helpers.py`, folders without
`__init__.py`); `alpha` seeds, `beta` does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli, scan_tree_copy

from detaudit.scan import ScanConfig, scan
from detaudit.scan.cache import ResultCache

COLLISIONS = REPO / "tests" / "fixtures" / "scan_collisions"
EXPECTED = {
    ("alpha/core/mixing.py", "warning", "__main__ of alpha/core/run.py", True),
    ("beta/core/mixing.py", "error", "__main__ of beta/core/run.py", False),
    ("alpha/scripts/helpers.py", "warning", "__main__ of alpha/scripts/train.py", True),
    ("beta/scripts/helpers.py", "error", "__main__ of beta/scripts/train.py", False),
}


@pytest.fixture
def projects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return scan_tree_copy(COLLISIONS, tmp_path, monkeypatch)


def summary(result) -> set[tuple[str, str, str, bool]]:
    return {(f.path, f.severity, p["entry"], p["seeded"]) for f in result.findings for p in f.processes}


@pytest.mark.parametrize("order", [("alpha", "beta"), ("beta", "alpha")])
def test_two_projects_at_once_keep_every_finding(projects: Path, order: tuple[str, str]) -> None:
    together = scan(list(order), ScanConfig(), use_cache=False)
    assert summary(together) == EXPECTED
    # ... what each project gives alone (imports resolve inside the importing project); alone, a
    # __main__ is named by its module, not by its path
    alone = summary(scan(["alpha"], ScanConfig(), use_cache=False)) | summary(scan(["beta"], ScanConfig(), use_cache=False))
    assert {(path, severity, seeded) for path, severity, _, seeded in alone} == {
        (path, severity, seeded) for path, severity, _, seeded in EXPECTED}
    shared = {note.split()[2] for note in together.notes if note.startswith("module name ")}
    assert shared == {"core", "core.mixing", "core.run", "helpers", "train"}


def test_identical_files_in_two_projects_do_not_share_cached_facts(projects: Path) -> None:
    # alpha's and beta's core/mixing.py and scripts/helpers.py have the same bytes
    assert (projects / "alpha/core/mixing.py").read_bytes() == (projects / "beta/core/mixing.py").read_bytes()
    scan(["alpha"], ScanConfig())  # cached under alpha's module names
    assert summary(scan(["alpha", "beta"], ScanConfig())) == EXPECTED
    for stored in ResultCache(True).folder.glob("*.pickle"):
        stored.unlink()
    again = scan(["alpha", "beta"], ScanConfig())  # from the facts cache: every file's own facts
    assert summary(again) == EXPECTED and again.cache_hits == again.files


def test_an_import_that_matches_none_of_the_shared_files_is_reported(projects: Path) -> None:
    (projects / "stray.py").write_text("from core.mixing import mix\n\n\nif __name__ == '__main__':\n    mix([1])\n")
    result = scan(["alpha", "beta", "stray.py"], ScanConfig(), use_cache=False)
    assert summary(result) == EXPECTED
    assert any(note.startswith("an import of core.mixing from ") and "calls through it are not followed" in note
               for note in result.notes)
    text = run_cli("scan-rng", "alpha", "beta", "stray.py", "--no-cache", cwd=projects)
    assert "note: module name core.mixing is shared by 2 files (alpha/core/mixing.py, beta/core/mixing.py)" in text.out
    as_json = run_cli("scan-rng", "alpha", "beta", "--format", "json", "--no-cache", cwd=projects)
    assert "detaudit: note: module name core.mixing is shared by 2 files" in as_json.err
    assert len(json.loads(as_json.out)["findings"]) == 4
    sarif = json.loads(run_cli("scan-rng", "alpha", "beta", "--format", "sarif", "--no-cache", cwd=projects).out)
    notes = [n["message"]["text"] for n in sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]]
    assert any("module name helpers is shared by 2 files" in n for n in notes)
    assert len(sarif["runs"][0]["results"]) == 4


def test_folders_without_init_in_one_project(projects: Path) -> None:
    # Two script folders of one project, each with its own helpers.py and train.py
    (projects / "alpha" / "tools").mkdir()
    for name in ("helpers.py", "train.py"):
        (projects / "alpha" / "tools" / name).write_text((projects / "beta" / "scripts" / name).read_text())
    found = {(f.path, f.severity) for f in scan(["alpha"], ScanConfig(), use_cache=False).findings}
    assert found == {("alpha/core/mixing.py", "warning"), ("alpha/scripts/helpers.py", "warning"),
                     ("alpha/tools/helpers.py", "error")}
