"""The three RL bugs of #41 on the reference recipe (Ray, diffusers, the tiny preset), each injected
by a recipe flag (recipes/diffusion_nft/config.py, [inject]) and named by the tool; without the
flag the tool reports clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.ray]

NFT = REPO / "recipes" / "sd3_pickscore_nft.toml"
PARITY = REPO / "recipes" / "sd3_flow_grpo_parity.toml"


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_rollouts_collected_in_completion_order_are_named_under_a_perturbed_schedule(tmp_path: Path) -> None:
    engines = ("--rollout-engines", "2", "--rollouts", "1")
    bug = run_cli("record", str(NFT), "--runs", "2", "--no-write", "--no-doctor", "--trace", "--perturb-schedule",
                  "--workdir", str(tmp_path / "bug"), "--", *engines, "--collect-in-completion-order", cwd=REPO)
    assert bug.code == 1 and "runs disagree" in bug.out, bug.text
    manager = REPO / "recipes" / "diffusion_nft" / "actors" / "manager.py"
    site = f"recipes/diffusion_nft/actors/manager.py:{line_of(manager, 'ray.wait(pending')} generate"
    text = " ".join(bug.out.split())
    assert (f"first differing arrival order: RolloutManager (Ray actor): ray.wait at {site}, gather 1 (it fed "
            "generate(rollout=0)): results arrived in another order: 0, 1 in run 1, 1, 0 in run 2") in text, bug.out
    clean = run_cli("record", str(NFT), "--runs", "2", "--no-write", "--no-doctor", "--trace", "--perturb-schedule",
                    "--workdir", str(tmp_path / "clean"), "--", *engines, cwd=REPO)
    assert clean.code == 0, clean.text
    assert "traces identical" in clean.out and "arrival order" not in clean.out.replace("op and arrival order", "")


def test_one_seed_per_group_is_named_and_distinct_seeds_are_clean(tmp_path: Path) -> None:
    bug = run_cli("trace", str(NFT), "--json", "--workdir", str(tmp_path / "bug"), "--", "--rollouts", "1",
                  "--one-seed-per-group", cwd=REPO)
    assert bug.code == 1, bug.text  # trace, doctor and verify --trace fail on it
    assert [r["reason"] for r in json.loads(bug.out)["why_not_ok"]] == ["seeds-repeated"]
    (repeat,) = json.loads(bug.out)["seeds"]["repeats"]
    sampling = REPO / "recipes" / "diffusion_nft" / "sampling.py"
    assert repeat["process"] == "RolloutEngine (Ray actor)" and repeat["api"] == "torch.Generator.manual_seed"
    assert repeat["site"] == f"recipes/diffusion_nft/sampling.py:{line_of(sampling, 'gen.manual_seed(')} initial_noise"
    assert repeat["step"].endswith(" generate") and (repeat["seeds"], repeat["distinct"]) == (8, 2)
    doctor = run_cli("doctor", str(NFT), "--no-ray", "--json", "--trace", str(tmp_path / "bug" / "run1" / "trace"),
                     cwd=REPO)
    rows = [r for r in json.loads(doctor.out) if r["check"] == "per-sample seeds"]
    assert doctor.code == 1 and [r["process"] for r in rows] == ["RolloutEngine (Ray actor)"] and not rows[0]["ok"]


def test_parity_of_the_engine_and_the_trainer_names_a_forward_in_another_precision(tmp_path: Path) -> None:
    clean = run_cli("trace", str(PARITY), "--modules", "--json", "--workdir", str(tmp_path / "clean"), cwd=REPO)
    assert clean.code == 0, clean.text
    doc = json.loads(clean.out)
    report = doc["parity"]
    assert report["ok"] and report["first"] is None and report["matched"] == report["agreed"] > 100, report
    assert doc["seeds"]["ok"] and doc["seeds"]["steps"] >= 2  # the engine's per-sample noise seeds: all distinct
    bug = run_cli("trace", str(PARITY), "--modules", "--json", "--workdir", str(tmp_path / "bug"), "--",
                  "--engine-autocast", "bf16", cwd=REPO)
    assert bug.code == 1, bug.text
    first = json.loads(bug.out)["parity"]["first"]
    trainer = REPO / "recipes" / "diffusion_nft" / "actors" / "trainer.py"
    assert first["module"] == "SD3Transformer2DModel.pos_embed.proj" and first["class"] == "Conv2d"
    assert first["site_b"] == f"recipes/diffusion_nft/actors/trainer.py:{line_of(trainer, 'out = self.model(')} predict"
    assert (first["dtypes_a"], first["dtypes_b"], first["ulp_dtype"]) == (["bfloat16"], ["float32"], "bfloat16")
    assert first["max_ulp"] > 0
