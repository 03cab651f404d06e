"""The train actor at world size 1: the plain module does FSDP2's mixed-precision arithmetic, bit for bit."""

from __future__ import annotations

import torch

from recipes.diffusion_nft.actors import TrainActor
from recipes.diffusion_nft.config import parse_args
from recipes.diffusion_nft.pipeline import free_port


def rollout_batch(n: int = 8, k: int = 9, group: int = 2) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    return {
        "x0": torch.randn(n, 4, 16, 16, generator=gen),
        "prompt_embeds": torch.randn(n // group, 20, 64, generator=gen),  # one row per prompt
        "pooled": torch.randn(n // group, 64, generator=gen),
        "prompt_row": torch.arange(n // group).repeat_interleave(group),
        "adv": adv,
        "r": (adv / 10 + 0.5).clamp(0, 1),
        "train_t": torch.rand(n, k, generator=gen) * 0.9 + 0.05,
    }


def two_updates(fsdp: bool, precision: str) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    import torch.distributed as dist

    args = parse_args(["--preset", "tiny", "--device", "cpu", "--precision", precision, "--micro-batch", "4",
                       "--sample-batch", "8"]).replace(fsdp_single_rank=fsdp, device="cpu")
    actor = TrainActor(args, 0, 1, free_port())
    try:
        metrics = actor.train(rollout_batch(), 0) + actor.train(rollout_batch(), 1)
        return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in metrics], actor.old_lora_state()
    finally:
        dist.destroy_process_group()


def test_plain_module_matches_fsdp_at_world_size_one() -> None:
    for precision in ("fp16", "bf16", "fp32"):
        plain, plain_state = two_updates(False, precision)
        sharded, sharded_state = two_updates(True, precision)
        assert plain == sharded, precision
        assert plain_state.keys() == sharded_state.keys()
        assert all(torch.equal(plain_state[k], sharded_state[k]) for k in plain_state), precision
        assert plain[1]["train/grad_norm"] > 0


def test_sample_conditioning_gathers_each_samples_prompt_row() -> None:
    from recipes.diffusion_nft.actors import sample_conditioning

    batch = rollout_batch()
    embeds, pooled = sample_conditioning(batch, torch.device("cpu"))
    assert torch.equal(embeds, batch["prompt_embeds"].repeat_interleave(2, dim=0))
    assert torch.equal(pooled, batch["pooled"].repeat_interleave(2, dim=0))


def test_old_lora_state_in_the_engines_dtype_rounds_as_the_engine_would() -> None:
    import torch.distributed as dist

    args = parse_args(["--preset", "tiny", "--device", "cpu", "--precision", "fp32"]).replace(device="cpu")
    actor = TrainActor(args, 0, 1, free_port())
    try:
        actor.train(rollout_batch(), 0)
        full, half = actor.old_lora_state(), actor.old_lora_state(torch.bfloat16)
    finally:
        dist.destroy_process_group()
    assert full.keys() == half.keys() and all(t.dtype == torch.bfloat16 for t in half.values())
    assert all(torch.equal(half[k], full[k].to(torch.bfloat16)) for k in full)
    assert any(not torch.equal(half[k].float(), full[k]) for k in full)  # the rounding is real
