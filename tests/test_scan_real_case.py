"""scan-rng on a tree shaped like the real miles case (issue #11): the bug is an error, port picks are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli, scan_tree_copy

from detaudit.scan import ScanConfig, scan

REAL_CASE = REPO / "tests" / "fixtures" / "real_case"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return scan_tree_copy(REAL_CASE, tmp_path, monkeypatch)


def findings(*paths: str, **config) -> dict[tuple[str, int], object]:
    result = scan(list(paths), ScanConfig(**config), use_cache=False)
    return {(f.path, f.line): f for f in result.findings}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("paths", [("pkg",), ("pkg", "train.py")], ids=["package-alone", "whole-tree"])
def test_the_real_bug_is_an_error_and_port_picks_are_not(tree: Path, paths: tuple[str, ...]) -> None:
    found = findings(*paths)
    randperm = found[("pkg/ray/hub/nft.py", 5)]
    assert randperm.rule == "DA101" and randperm.severity == "error"
    assert [(p["entry"], p["seeded"]) for p in randperm.processes] == [("RolloutManager (Ray actor)", False)]
    assert randperm.via == ["reached via load_function(args.expand_path): candidates "
                            "pkg.ray.hub.grpo.expand_groups, pkg.ray.hub.nft.expand_pairs"]
    # generator=None reaches the draw from the engine (which passes none); the train actor passes one.
    noise = found[("pkg/models/noise.py", 5)]
    assert noise.severity == "error"
    assert [(p["entry"], p["seeded"]) for p in noise.processes] == [("RolloutEngine (Ray actor)", False)]
    assert "not passed at: pkg/ray/engine.py:12 (RolloutEngine (Ray actor))" in noise.note
    assert "train_actor.py" not in noise.note
    # Port picks: an inherited __init__ (runs before init() seeds) and a router port.
    for key, name in ((("pkg/ray/base.py", 6), "master_port"), (("pkg/ray/rollout.py", 19), "router_port")):
        port = found[key]
        assert port.severity == "warning" and port.note.endswith(f"at most a warning: it only reaches {name}")
    inherited = found[("pkg/ray/base.py", 6)]
    assert {p["entry"]: p["seeded"] for p in inherited.processes} == {
        "RolloutManager (Ray actor)": False, "TrainRayActor (Ray actor)": False}  # __init__ runs before init()
    shuffle = found[("pkg/ray/train_actor.py", 16)]
    assert shuffle.severity == "warning" and shuffle.processes[0]["seeded"] is True
    assert sum(f.severity == "error" for f in found.values()) == 2


def test_cli_exit_code_and_text(tree: Path) -> None:
    for paths in (["pkg"], ["pkg", "train.py"]):
        result = run_cli("scan-rng", *paths, "--no-cache", cwd=tree)
        assert result.code == 1, result.text
        assert "runs in: RolloutManager (Ray actor) UNSEEDED" in result.out
        assert "reached via load_function(args.expand_path): candidates" in result.out
    data = json.loads(run_cli("scan-rng", "pkg", "--format", "json", "--no-cache", cwd=tree).out)["findings"]
    assert {f["path"] for f in data if f["severity"] == "error"} == {"pkg/ray/hub/nft.py", "pkg/models/noise.py"}


def test_the_fix_seeding_the_manager_clears_the_error(tree: Path) -> None:
    rollout = tree / "pkg" / "ray" / "rollout.py"
    edit(rollout, "        super().__init__()\n", "        super().__init__()\n        torch.manual_seed(args.seed)\n")
    for paths in (("pkg",), ("pkg", "train.py")):
        randperm = findings(*paths)[("pkg/ray/hub/nft.py", 5)]
        assert randperm.severity == "warning" and randperm.processes[0]["seeded"] is True


def test_train_actor_is_seeded_through_init_and_a_helper(tree: Path) -> None:
    result = scan(["pkg"], ScanConfig(), use_cache=False)
    seeded = {p["entry"]: p["seeded"] for p in result.processes}
    assert seeded["TrainRayActor (Ray actor)"] == ["numpy", "random", "torch"]
    assert seeded["RolloutManager (Ray actor)"] == [] and seeded["RolloutEngine (Ray actor)"] == []


def test_a_local_generator_seed_is_not_global_seeding(tree: Path) -> None:
    edit(tree / "pkg" / "ray" / "train_actor.py", "        set_seed(args.seed)\n", "")
    shuffle = findings("pkg")[("pkg/ray/train_actor.py", 15)]  # one line up
    assert shuffle.severity == "error" and shuffle.processes[0]["seeded"] is False


def test_seeding_in_a_later_method_does_not_cover_init(tree: Path) -> None:
    train = tree / "pkg" / "ray" / "train_actor.py"
    edit(train, "class TrainRayActor(RayActor):\n",
         "class TrainRayActor(RayActor):\n    def __init__(self):\n        self.w = torch.rand(3)\n\n")
    found = findings("pkg")
    draw = found[("pkg/ray/train_actor.py", 10)]
    assert draw.severity == "error" and draw.processes[0]["seeded"] is False
    assert found[("pkg/ray/train_actor.py", 19)].severity == "warning"  # the shuffle, after init()


def test_unknown_process_is_unproven_unless_asked(tree: Path) -> None:
    (tree / "pkg" / "orphan.py").write_text("import torch\n\n\ndef unused(n):\n    return torch.rand(n)\n")
    orphan = findings("pkg")[("pkg/orphan.py", 5)]
    assert orphan.severity == "unproven" and "cannot show that a seeded process runs it" in orphan.note
    assert findings("pkg", unknown_process="warning")[("pkg/orphan.py", 5)].severity == "warning"
    assert findings("pkg", unknown_process="error")[("pkg/orphan.py", 5)].severity == "error"
    cli = run_cli("scan-rng", "pkg/orphan.py", "--unknown-process", "warning", "--no-cache", cwd=tree)
    assert cli.code == 0 and "warning DA101" in cli.out
    default = run_cli("scan-rng", "pkg/orphan.py", "--no-cache", cwd=tree)
    assert default.code == 0 and "unproven DA101" in default.out and "0 errors, 1 unproven, 0 warnings" in default.out
    assert run_cli("scan-rng", "pkg/orphan.py", "--fail-on", "unproven", "--no-cache", cwd=tree).code == 1
