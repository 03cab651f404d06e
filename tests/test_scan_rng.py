"""scan-rng on a fixture corpus: every rule, alias form, guard, suppression, process context."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO, run_cli, scan_tree_copy

from detaudit.scan import ScanConfig, apply_baseline, scan, write_baseline

CORPUS = REPO / "tests" / "fixtures" / "scan_corpus"


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return scan_tree_copy(CORPUS, tmp_path, monkeypatch)


def run_scan(*paths: str, **kw):
    return scan(list(paths), ScanConfig(), **kw)


def by_line(findings, path: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for f in findings:
        if f.path == path:
            out.setdefault(f.line, []).append(f.rule)
    return out


def test_every_rule_and_alias_form(corpus: Path) -> None:
    result = run_scan("pkg")
    lines = by_line(result.findings, "pkg/aliases.py")
    assert lines == {
        14: ["DA101"],  # from torch import randperm as rp
        15: ["DA201"],  # import numpy.random as npr
        16: ["DA101"],  # import torch as T
        17: ["DA301"],  # from random import shuffle
        18: ["DA102"],  # x.uniform_(0, 1)
        20: ["DA103"],
        21: ["DA104"],
        22: ["DA104"],
        23: ["DA202"],
        25: ["DA202"],
        26: ["DA202"],
        27: ["DA302"],
        28: ["DA302"],
        30: ["DA303"],
        31: ["DA303"],
        32: ["DA303"],
        37: ["DA101"],  # ignore[DA201] does not cover DA101
    }
    # generator= (19), seeded default_rng (24), Random(4) (29), a seeded RandomState's methods (34),
    # and the two suppressed lines (35, 36) have no finding.


def test_process_context_seeded_unseeded_and_cross_module(corpus: Path) -> None:
    result = run_scan("pkg")
    found = {(f.path, f.line): f for f in result.findings}
    to_pairs = found[("pkg/helpers.py", 8)]
    assert to_pairs.severity == "error"
    assert to_pairs.processes == [{"entry": "RolloutManager (Ray actor)", "kind": "ray-actor",
                                   "target": "pkg.actors.RolloutManager", "seeded": False}]
    seeded = found[("pkg/helpers.py", 12)]
    assert seeded.severity == "warning" and seeded.processes[0]["entry"] == "Trainer (Ray actor)"
    assert seeded.processes[0]["seeded"] is True
    guarded = found[("pkg/helpers.py", 17)]
    assert guarded.guards == ["args.loss_type == 'nft'"] and guarded.severity == "error"
    assert guarded.processes[0]["entry"] == "Worker (Ray actor)"  # ray.remote(Worker), via `helpers as H`
    assert ("pkg/helpers.py", 22) not in found  # generator= guards the call
    task = found[("pkg/actors.py", 40)]
    assert task.rule == "DA201" and task.processes[0]["entry"] == "task (Ray task)" and task.severity == "error"
    main = found[("pkg/main_mod.py", 7)]
    assert main.severity == "warning" and main.processes[0]["entry"] == "__main__ of pkg.main_mod"
    assert found[("pkg/mp.py", 9)].processes[0]["entry"] == "work (multiprocessing target)"
    init = found[("pkg/mp.py", 17)]
    assert init.severity == "error" and init.processes[0]["entry"] == "init_fn (DataLoader worker_init_fn)"
    assert found[("pkg/aliases.py", 14)].note.startswith("no known process")


def test_bad_files_are_reported_and_skipped(corpus: Path) -> None:
    big = corpus / "pkg" / "big.py"
    big.write_text("import random\n" + "x = 1\n" * 800_000)
    (corpus / "pkg" / "loop").symlink_to(corpus / "pkg", target_is_directory=True)
    result = run_scan("pkg")
    reasons = {s.path: s.reason for s in result.skipped}
    assert reasons["pkg/bad_syntax.py"].startswith("cannot parse: invalid syntax (line 3)")
    assert reasons["pkg/latin1.py"].startswith("not UTF-8")
    assert reasons["pkg/big.py"].startswith("larger than 4 MB")
    assert not any("loop" in f.path for f in result.findings)


def test_baseline_round_trip(corpus: Path) -> None:
    result = run_scan("pkg")
    write_baseline(corpus / "baseline.json", result.findings)
    kept, dropped = apply_baseline(corpus / "baseline.json", run_scan("pkg").findings)
    assert kept == [] and dropped == len(result.findings)
    (corpus / "pkg" / "new.py").write_text("import torch\n\ndef f():\n    return torch.rand(1)\n")
    kept, _ = apply_baseline(corpus / "baseline.json", run_scan("pkg").findings)
    assert [(f.path, f.rule) for f in kept] == [("pkg/new.py", "DA101")]
    cli = run_cli("scan-rng", "pkg", "--baseline", "baseline.json", "--format", "json", cwd=corpus)
    # The new draw runs in no known process of a tree with entry points: an error (fail closed).
    assert cli.code == 1 and [f["path"] for f in json.loads(cli.out)["findings"]] == ["pkg/new.py"]


def test_cache_reuses_facts_and_no_cache_bypasses(corpus: Path) -> None:
    first = run_scan("pkg")
    second = run_scan("pkg")
    assert second.cache_hits == second.files and first.findings == second.findings
    assert run_scan("pkg", use_cache=False).cache_hits == 0
    helpers = corpus / "pkg" / "helpers.py"
    helpers.write_text(helpers.read_text().replace("torch.randperm(n)", "torch.randperm(n, generator=g)"))
    third = run_scan("pkg")
    assert ("pkg/helpers.py", 8) not in {(f.path, f.line) for f in third.findings}


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_cli_formats_and_exit_codes(corpus: Path) -> None:
    text = run_cli("scan-rng", "pkg", cwd=corpus)
    assert text.code == 1 and "runs in: RolloutManager (Ray actor) UNSEEDED" in text.out
    assert "only when `args.loss_type == 'nft'`" in text.out
    doc = json.loads(run_cli("scan-rng", "pkg", "--format", "json", cwd=corpus).out)
    data = doc["findings"]
    first = next(f for f in data if f["path"] == "pkg/helpers.py" and f["line"] == 8)
    assert {"path", "line", "col", "rule", "severity", "message", "processes"} <= set(first)
    assert first["processes"][0]["entry"] == "RolloutManager (Ray actor)" and first["processes"][0]["seeded"] is False
    sarif = json.loads(run_cli("scan-rng", "pkg", "--format", "sarif", cwd=corpus).out)
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"][0]["ruleId"].startswith("DA")
    github = run_cli("scan-rng", "pkg", "--format", "github", cwd=corpus).out.splitlines()
    assert any(line.startswith("::error file=pkg/helpers.py,line=8,") for line in github)
    # helpers' draws that main_mod's process does not run: unproven (fail closed: shown and counted, not
    # dropped; exit 1 with --fail-on unproven), errors on request, warnings on request.
    partial = run_cli("scan-rng", "pkg/main_mod.py", "pkg/helpers.py", cwd=corpus)
    assert partial.code == 0 and " unproven, " in partial.out and "0 unproven" not in partial.out
    assert run_cli("scan-rng", "pkg/main_mod.py", "pkg/helpers.py", "--fail-on", "unproven", cwd=corpus).code == 1
    assert run_cli("scan-rng", "pkg/main_mod.py", "pkg/helpers.py", "--unknown-process", "error", cwd=corpus).code == 1
    library = ("scan-rng", "pkg/main_mod.py", "pkg/helpers.py", "--unknown-process", "warning")
    assert run_cli(*library, cwd=corpus).code == 0  # warnings only
    assert run_cli(*library, "--fail-on", "warning", cwd=corpus).code == 1
    assert run_cli("scan-rng", "pkg", "--fail-on", "never", cwd=corpus).code == 0
    missing = run_cli("scan-rng", "nope", cwd=corpus)
    assert missing.code == 2 and "nope: no such file or directory" in missing.err
    # Same inputs, same bytes.
    assert run_cli("scan-rng", "pkg", "--format", "json", cwd=corpus).out == json.dumps(doc, indent=2, sort_keys=True) + "\n"


def test_pyproject_settings(corpus: Path) -> None:
    (corpus / "pyproject.toml").write_text('[tool.detaudit]\nignore = ["DA104", "DA3"]\nexclude = ["pkg/mp.py"]\n')
    data = json.loads(run_cli("scan-rng", "pkg", "--format", "json", cwd=corpus).out)["findings"]
    rules = {f["rule"] for f in data}
    assert "DA104" not in rules and not any(r.startswith("DA3") for r in rules) and "DA101" in rules
    assert not any(f["path"] == "pkg/mp.py" for f in data)
    selected = json.loads(run_cli("scan-rng", "pkg", "--format", "json", "--select", "DA2", cwd=corpus).out)["findings"]
    assert {f["rule"] for f in selected} == {"DA201", "DA202"}
    (corpus / "pyproject.toml").write_text('[tool.detaudit]\ncolour = ["x"]\n')
    bad = run_cli("scan-rng", "pkg", cwd=corpus)
    assert bad.code == 2 and "pyproject.toml: [tool.detaudit] colour: unknown key" in bad.err


def test_the_project_itself_has_no_unseeded_draw() -> None:
    result = run_cli("scan-rng", "detaudit", "recipes", "--format", "json", "--no-cache", cwd=REPO)
    assert result.code == 0, result.text
    findings = json.loads(result.out)["findings"]
    assert not [f for f in findings if f["severity"] == "error"]
    # The one deliberate global draw (DiffusionNFT's per-sample shuffle) runs only in a seeded actor,
    # which loads the algorithm's module by a lookup in ALGORITHM_MODULES (algorithms/__init__.py).
    (shuffle,) = findings
    assert shuffle["path"] == "recipes/diffusion_nft/algorithms/nft.py" and shuffle["rule"] == "DA101"
    assert shuffle["processes"] == [{"entry": "RolloutManager (Ray actor)", "kind": "ray-actor",
                                     "target": "recipes.diffusion_nft.actors.manager.RolloutManager", "seeded": True}]
    (via,) = shuffle["via"]
    assert via.startswith("reached via importlib.import_module(ALGORITHM_MODULES[config.job.algorithm])")
    assert "recipes.diffusion_nft.algorithms.nft.train_data" in via
    assert "recipes.diffusion_nft.algorithms.flow_grpo.train_data" in via


def test_pre_commit_hook_is_declared() -> None:
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert "id: detaudit-scan-rng" in text and "entry: detaudit scan-rng" in text
    assert os.path.exists(REPO / "tests" / "fixtures" / "scan_corpus" / "pkg" / "aliases.py")


CALL_SITE_GUARDS = {
    "pkg/__init__.py": "",
    "pkg/conv.py": '''import torch


def shuffle(n):
    return torch.randperm(n)


def both(n):
    return torch.rand(n)


def cycle(n, k):
    if k:
        return cycle(n, k - 1)
    return torch.randn(n)
''',
    "pkg/run.py": '''import ray
import torch

from pkg import conv


def pairs(algorithm, n):
    if algorithm == "nft":
        if n > 2:
            return conv.shuffle(n)
        conv.both(n)
    else:
        conv.both(n)
    return None


@ray.remote
class Manager:
    def __init__(self):
        torch.manual_seed(0)

    def step(self, algorithm):
        if algorithm != "off":
            pairs(algorithm, 4)
        conv.cycle(3, 2)


@ray.remote
class Other:
    def __init__(self):
        torch.manual_seed(1)

    def go(self, fast):
        if fast:
            conv.both(2)
''',
}


def test_call_site_guards_say_when_a_draw_is_reached(tmp_path: Path) -> None:
    """`if` conditions at the call sites on every path from a process to the draw (issue #14)."""
    for name, text in CALL_SITE_GUARDS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = run_cli("scan-rng", "pkg", "--format", "json", "--no-cache", cwd=tmp_path)
    assert result.code == 0, result.text
    reached = {f["function"].rpartition(".")[2]: [(g["condition"], g["caller"], g["line"], g["path"])
                                                  for g in f["reached_only_when"]]
               for f in json.loads(result.out)["findings"]}
    # Nested conditions in the caller, then the caller's own call site.
    assert reached["shuffle"] == [("algorithm == 'nft'", "pkg.run.pairs", 10, "pkg/run.py"),
                                  ("n > 2", "pkg.run.pairs", 10, "pkg/run.py"),
                                  ("algorithm != 'off'", "pkg.run.Manager.step", 24, "pkg/run.py")]
    # Called in both branches of one `if` and from another process under another condition:
    # only what holds on every path remains (nothing).
    assert reached["both"] == []
    # A recursive call under `if k` does not hide the unconditional call from step().
    assert reached["cycle"] == []
    text = run_cli("scan-rng", "pkg", "--no-cache", cwd=tmp_path).out
    assert ("reached only when `algorithm == 'nft'` (the call at pkg/run.py:10 in pairs) and `n > 2` "
            "(the call at pkg/run.py:10 in pairs) and `algorithm != 'off'` (the call at pkg/run.py:24 in step)") \
        in " ".join(text.split())
    # Without the other process, `both` is reached only through pairs(), which step() calls under a condition.
    (tmp_path / "pkg/run.py").write_text(CALL_SITE_GUARDS["pkg/run.py"].split("@ray.remote\nclass Other")[0])
    again = {f["function"].rpartition(".")[2]: [g["condition"] for g in f["reached_only_when"]]
             for f in json.loads(run_cli("scan-rng", "pkg", "--format", "json", "--no-cache", cwd=tmp_path).out)["findings"]}
    assert again["both"] == ["algorithm != 'off'"]
