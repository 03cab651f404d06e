"""Per-sample seeds: the seeds a traced process gives to torch.Generator.manual_seed,
np.random.default_rng, random.Random and torch.manual_seed, and seeds repeated within one step
across the samples of a group (tests/recipes/gather_recipe.py --seeds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.flows.doctor_trace import seed_rows
from detaudit.render.seed_repeats import check_lines, repeat_line
from detaudit.trace import trace_env
from detaudit.trace.files import read_trace
from detaudit.trace.seed_repeats import seed_check

GATHER = REPO / "tests" / "recipes" / "gather_recipe.py"
SEEDS_SCRIPT = """
import random
import numpy as np
import torch

def sample(i):
    return torch.Generator().manual_seed(100 + i)   # one per call: the caller's call is the step

def step(n):
    gens = [sample(i % 2) for i in range(4)]        # two distinct seeds, each twice: repeated
    rngs = []
    for i in range(3):                              # the loop is in this function: its call is the step
        rngs.append(np.random.default_rng(7 + i))
    random.Random(5); random.Random(5)              # two seeds, one value: the same seed reapplied
    random.Random(); random.Random()                # seeds from the OS: recorded, never in a step's group
    torch.manual_seed(1)

for n in range(2):
    step(n)
import tempfile
tempfile.mkdtemp()                                  # the library's own Random(): not the program's seed
"""


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def traced(tmp_path: Path, *args: str, script: str | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_")}
    env["PYTHONPATH"] = str(REPO)
    env["DETAUDIT_METRICS_JSONL"] = str(tmp_path / "metrics.jsonl")
    env = trace_env("rng", tmp_path / "trace", env)
    program = GATHER
    if script is not None:
        program = tmp_path / "s.py"
        program.write_text(script)
    proc = subprocess.run([sys.executable, str(program), *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "trace"


@pytest.mark.slow
def test_seeds_are_recorded_with_site_and_steps_told_apart(tmp_path: Path) -> None:
    (main,) = read_trace(traced(tmp_path, script=SEEDS_SCRIPT)).processes
    values = {(v["api"], v["site"], v["value"]) for v in main.seed_values}
    sample = f"s.py:{line_of(SEEDS_SCRIPT, 'manual_seed(100 + i)')} sample"
    assert ("torch.Generator.manual_seed", sample, "100") in values
    assert ("np.random.default_rng", f"s.py:{line_of(SEEDS_SCRIPT, 'default_rng(7 + i)')} step", "9") in values
    assert ("torch.manual_seed", f"s.py:{line_of(SEEDS_SCRIPT, 'torch.manual_seed(1)')} step", "1") in values
    assert not any("tempfile" in v["site"] for v in main.seed_values)
    assert ("random.Random", f"s.py:{line_of(SEEDS_SCRIPT, 'random.Random(); random.Random()')} step", "None") in values
    groups = {(g["api"], g["call"]): g for g in main.seed_groups}
    step_site = f"s.py:{line_of(SEEDS_SCRIPT, 'gens = [sample(')} step"
    first = groups[("torch.Generator.manual_seed", 1)]
    assert (first["step"], first["seeds"], first["distinct"], first["repeated"]) == (step_site, 4, 2,
                                                                                      [["100", 2], ["101", 2]])
    assert groups[("torch.Generator.manual_seed", 2)]["seeds"] == 4  # the second step is a group of its own
    rngs = groups[("np.random.default_rng", 1)]
    assert rngs["step"].endswith(" step") and (rngs["seeds"], rngs["distinct"], rngs["repeated"]) == (3, 3, [])
    check = seed_check(read_trace(tmp_path / "trace"))
    (repeat,) = check.repeats
    assert (repeat.api, repeat.site, repeat.steps) == ("torch.Generator.manual_seed", sample, 2)
    assert repeat_line(repeat) == (
        f"seeds repeated within a step: main process: torch.Generator.manual_seed at {sample}, in call 1 of step "
        f"(s.py:{line_of(SEEDS_SCRIPT, 'gens = [sample(')}): 4 seeds, 2 distinct (100 x2, 101 x2): samples seeded "
        "alike sample alike (a group of identical samples has zero advantage); 2 steps at this site did")
    # one value in a step (random.Random(5) twice; torch.manual_seed(1) once per call of step, from the
    # module's one call): a seed reapplied, counted apart, never a repeat
    assert sorted(g["api"] for g in check.same_seed) == ["random.Random", "random.Random", "torch.manual_seed"]


@pytest.mark.slow
def test_one_seed_per_group_fails_the_check_and_distinct_seeds_pass(tmp_path: Path) -> None:
    bad = traced(tmp_path / "bad", "--chain", "forward", "--seeds", "--one-seed-per-group")
    good = traced(tmp_path / "good", "--chain", "forward", "--seeds")
    check = seed_check(read_trace(bad))
    (repeat,) = check.repeats
    assert repeat.site.endswith("sample_noise") and (repeat.seeds, repeat.distinct) == (6, 2) and repeat.steps == 2
    clean = seed_check(read_trace(good))
    assert clean.ok and clean.steps == 2
    assert check_lines(clean) == [("green", "per-sample seeds: 2 step(s) at 1 call site(s) checked, no seed repeated "
                                            "within a step")]
    rows = seed_rows(bad)
    assert [(r.process, r.check, r.ok) for r in rows] == [("main process", "per-sample seeds", False)]
    assert "torch.Generator.manual_seed at gather_recipe.py:" in rows[0].value and rows[0].fix
    assert [(r.check, r.ok) for r in seed_rows(good)] == [("per-sample seeds", True)]


@pytest.mark.slow
def test_doctor_and_verify_trace_fail_on_seeds_repeated_within_a_step(tmp_path: Path) -> None:
    card = write_card(tmp_path / "seeds.toml", name="toy", recipe=GATHER, args=["--chain", "forward", "--seeds"])
    recorded = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "rec"))
    assert recorded.code == 0, recorded.text
    # the bug leaves the metrics alone (they do not read the noise): only the trace sees it
    result = run_cli("verify", str(card), "--trace", "--workdir", str(tmp_path / "v"), "--", "--one-seed-per-group")
    assert result.code == 1, result.text
    assert "but the trace found samples of one step seeded alike" in result.out
    assert "seeds repeated within a step: main process: torch.Generator.manual_seed at gather_recipe.py:" in result.out
    passed = run_cli("verify", str(card), "--trace", "--json", "--workdir", str(tmp_path / "v3"))
    assert passed.code == 0, passed.text
    seeds = json.loads(passed.out)["trace"]["seeds"]
    assert seeds["ok"] and seeds["steps"] == 2 and seeds["repeats"] == []
    doctor = run_cli("doctor", str(card), "--no-ray", "--json", "--trace", str(tmp_path / "v" / "run1" / "trace"))
    rows = json.loads(doctor.out)
    assert doctor.code == 1 and [r["ok"] for r in rows if r["check"] == "per-sample seeds"] == [False]
