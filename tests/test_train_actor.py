"""The train actor at world size 1: the plain module does FSDP2's mixed-precision arithmetic, bit for bit.

A train actor opens a gloo process group: each test runs its actors in a fresh interpreter
(``SCRIPT``), never in the pytest process, and asserts on what that process saved.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO

pytestmark = pytest.mark.recipe


def rollout_batch(n: int = 8, k: int = 9, group: int = 2, text_tokens: int = 20) -> dict[str, torch.Tensor]:
    """A rollout's batch of the tiny preset's shapes; a real rollout has 2 prompts of 4 samples and
    154 text tokens (CLIP's 77, then T5's 77)."""
    gen = torch.Generator().manual_seed(3)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    return {
        "x0": torch.randn(n, 4, 16, 16, generator=gen),
        "prompt_embeds": torch.randn(n // group, text_tokens, 64, generator=gen),  # one row per prompt
        "pooled": torch.randn(n // group, 64, generator=gen),
        "prompt_row": torch.arange(n // group).repeat_interleave(group),
        "adv": adv,
        "r": (adv / 10 + 0.5).clamp(0, 1),
        "train_t": torch.rand(n, k, generator=gen) * 0.9 + 0.05,
    }


SCRIPT = r"""
import sys
import torch
import torch.distributed as dist
sys.path.insert(0, "tests")
from test_train_actor import rollout_batch
from recipes.diffusion_nft.actors.trainer import TrainActor
from recipes.diffusion_nft.config import parse_args
import tempfile
from recipes.diffusion_nft.ports import file_rendezvous
RENDEZVOUS = tempfile.TemporaryDirectory()  # removed at exit

def actor(flags, fsdp=False):
    config = parse_args(["--preset", "tiny", "--device", "cpu", *flags])
    return TrainActor(config.replace("training", fsdp_single_rank=fsdp), 0, 1, file_rendezvous(tempfile.mkdtemp(dir=RENDEZVOUS.name)))

def two_updates(fsdp, precision):
    trainer = actor(["--precision", precision, "--micro-batch", "4", "--sample-batch", "8"], fsdp)
    try:
        metrics = trainer.train(rollout_batch(), 0) + trainer.train(rollout_batch(), 1)
        return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in metrics], trainer.old_lora_state()
    finally:
        dist.destroy_process_group()

mode, out = sys.argv[1], sys.argv[2]
if mode == "plain-vs-fsdp":
    result = {p: {"plain": two_updates(False, p), "sharded": two_updates(True, p)} for p in ("fp16", "bf16", "fp32")}
elif mode == "micro-batches":  # one optimizer step over 8 samples, whole or in micro-batches of 4 and 3
    def one_step(micro):
        trainer = actor(["--precision", "fp32", "--micro-batch", str(micro)])
        try:
            return trainer.train(rollout_batch(), 0), trainer.old_lora_state()
        finally:
            dist.destroy_process_group()
    result = {micro: one_step(micro) for micro in (8, 4, 3)}
elif mode == "fused":  # fp16 whose first step overflows (scale 2^40), then steps; foreach and fused AdamW
    def overflow_then_step(fused):
        flags = ["--precision", "fp16", "--grad-scaler-init", "1099511627776",
                 "--grad-scaler-backoff", "9.5367431640625e-07"]
        trainer = actor(flags + (["--fused-optimizer"] if fused else []))
        try:
            weights = lambda: {i: p.detach().clone() for i, p in enumerate(trainer.params)}
            start = weights()
            first = trainer.train(rollout_batch(), 0)
            after_first = weights()
            second = trainer.train(rollout_batch(), 1)
            steps = [s["step"].item() for s in trainer.optimizer.state.values()]
            return {"metrics": first + second, "start": start, "after_first": after_first,
                    "end": weights(), "steps": steps,
                    "fused": bool(trainer.optimizer.defaults.get("fused"))}
        finally:
            dist.destroy_process_group()
    result = {fused: overflow_then_step(fused) for fused in (False, True)}
else:  # engine-dtype
    trainer = actor(["--precision", "fp32"])
    try:
        trainer.train(rollout_batch(), 0)
        result = {"full": trainer.old_lora_state(), "half": trainer.old_lora_state(torch.bfloat16)}
    finally:
        dist.destroy_process_group()
torch.save(result, out)
"""


def in_fresh_process(mode: str, tmp_path: Path) -> dict:
    out = tmp_path / f"{mode}.pt"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.slow
def test_plain_module_matches_fsdp_at_world_size_one(tmp_path: Path) -> None:
    for precision, runs in in_fresh_process("plain-vs-fsdp", tmp_path).items():
        plain, plain_state = runs["plain"]
        sharded, sharded_state = runs["sharded"]
        assert plain == sharded, precision
        assert plain_state.keys() == sharded_state.keys()
        assert all(torch.equal(plain_state[k], sharded_state[k]) for k in plain_state), precision
        assert plain[1]["train/grad_norm"] > 0


@pytest.mark.slow
def test_micro_batches_accumulate_to_the_whole_batchs_step(tmp_path: Path) -> None:
    """The optimizer-step loop weights each micro-batch by its share of the samples (a last,
    smaller one too): the same step as the whole batch at once, up to float rounding."""
    result = in_fresh_process("micro-batches", tmp_path)
    (whole,), whole_state = result[8]
    for micro in (4, 3):
        (step,), state = result[micro]
        for key in ("train/loss", "train/nft_loss", "train/kl_loss", "train/grad_norm"):
            assert step[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-9), (micro, key)
        # Adam's first step is about lr * sign(grad): weights agree to a small part of lr (3e-4).
        assert max((state[k] - whole_state[k]).abs().max().item() for k in state) < 3e-6, micro
    assert whole["train/grad_norm"] > 0  # and the step moved the weights (LoRA B starts at zero)
    assert any(whole_state[k].abs().sum() > 0 for k in whole_state if "lora_B" in k)


def test_sample_conditioning_gathers_each_samples_prompt_row() -> None:
    from recipes.diffusion_nft.algorithms import sample_conditioning

    batch = rollout_batch()
    embeds, pooled = sample_conditioning(batch, torch.device("cpu"))
    assert torch.equal(embeds, batch["prompt_embeds"].repeat_interleave(2, dim=0))
    assert torch.equal(pooled, batch["pooled"].repeat_interleave(2, dim=0))


@pytest.mark.slow
def test_old_lora_state_in_the_engines_dtype_rounds_as_the_engine_would(tmp_path: Path) -> None:
    result = in_fresh_process("engine-dtype", tmp_path)
    full, half = result["full"], result["half"]
    assert full.keys() == half.keys() and all(t.dtype == torch.bfloat16 for t in half.values())
    assert all(torch.equal(half[k], full[k].to(torch.bfloat16)) for k in full)
    assert any(not torch.equal(half[k].float(), full[k]) for k in full)  # the rounding is real


@pytest.mark.slow
def test_fused_adamw_skips_an_overflowed_step_like_the_foreach_one(tmp_path: Path) -> None:
    """--fused-optimizer (the portable card's): the grad scaler still skips the step whose fp16
    gradients overflowed (weights and Adam's step count untouched), and the next step moves the
    weights as the foreach AdamW does, up to the square root's rounding."""
    result = in_fresh_process("fused", tmp_path)
    foreach, fused = result[False], result[True]
    assert (foreach["fused"], fused["fused"]) == (False, True)
    for run in (foreach, fused):
        first, second = run["metrics"]
        assert first["train/grad_norm"] != first["train/grad_norm"] or first["train/grad_norm"] == float("inf")
        assert all(torch.equal(run["start"][k], run["after_first"][k]) for k in run["start"])  # skipped
        assert set(run["steps"]) == {1.0} and second["train/grad_norm"] > 0
        assert any(not torch.equal(run["start"][k], run["end"][k]) for k in run["start"])  # stepped
    assert foreach["metrics"][1]["train/loss"] == fused["metrics"][1]["train/loss"]  # same weights going in
    assert max((fused["end"][k] - foreach["end"][k]).abs().max().item() for k in fused["end"]) < 1e-6
