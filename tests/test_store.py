"""Where standards live (detaudit/standards/store.py, issue #40): one module names every path."""

from __future__ import annotations

import json
from pathlib import Path

from detaudit.data.card import load_card
from detaudit.runner_class import RunnerClass
from detaudit.standards.store import (
    MAX_NAME_BYTES,
    approximate_standard_path,
    file_name_of_test,
    obtained_path,
    standard_of_test,
    standard_path,
    standards_of_card,
    unused_standards,
)


def test_a_cards_standards_by_class_and_exact_name(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('name = "ok"\ncommand = ["x"]\nstandards_dir = "std"\n')
    card = load_card(tmp_path / "c.toml")
    cls = RunnerClass(("h200", "1gpu"))
    assert standard_path(card, cls) == tmp_path / "std" / "ok.h200-1gpu.json"
    assert approximate_standard_path(card, "h100-1gpu") == tmp_path / "std" / "ok.h100-1gpu.json"
    (tmp_path / "std").mkdir()
    body = {"schema": "detaudit/standard/1", "series": {"a": {"step_key": "s", "points": [[0, 1]]}}}
    for name, std_name, runner in (("ok.h200-1gpu.json", "ok", ["h200", "1gpu"]),
                                   ("ok.v2.h200-1gpu.json", "ok.v2", ["h200", "1gpu"]),  # card ok.v2's
                                   ("ok.cpu-x.json", "ok", ["cpu", "y"])):  # its class is not its name
        (tmp_path / "std" / name).write_text(json.dumps({**body, "name": std_name, "runner": {"class": runner}}))
    assert [p.name for p, _ in standards_of_card(card)] == ["ok.h200-1gpu.json"]


def test_a_tests_standard_and_long_names(tmp_path: Path) -> None:
    test_file = tmp_path / "tests" / "test_train.py"
    assert standard_of_test(test_file, "test_a[1/2]", "standards") == \
        tmp_path / "tests" / "standards" / "test_train" / "test_a[1_2].json"
    long_a, long_b = "t[" + "x" * 300 + "a]", "t[" + "x" * 300 + "b]"
    a, b = file_name_of_test(long_a), file_name_of_test(long_b)
    assert a != b and len(a.encode()) <= MAX_NAME_BYTES + 5 and a.endswith(".json") and a[:100] == b[:100]
    assert file_name_of_test(long_a) == a  # the same name, the same file
    assert file_name_of_test("ü" * 200).encode("utf-8")  # cut on a character, not inside one
    assert obtained_path(tmp_path / "s" / "x.json", ".jsonl") == tmp_path / "s" / "x.obtained.jsonl"


def test_unused_standards(tmp_path: Path) -> None:
    folder = tmp_path / "standards" / "test_m"
    folder.mkdir(parents=True)
    for name in ("used.json", "owned.json", "stale.json", "used.obtained.json", "notes.txt"):
        (folder / name).write_text("{}")
    found = unused_standards([folder, tmp_path / "missing"], used={folder / "used.json"}, owners={folder / "owned.json"})
    assert found == [folder / "stale.json"]
