"""What every actor does at start-up."""

from __future__ import annotations

import torch

from detaudit.env import determinism
from recipes.diffusion_nft.config import JobConfig

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def setup_process(config: JobConfig, role: str) -> torch.device:
    """Per-actor start-up: threads, and the seeding that --deterministic-mode promises."""
    if config.placement.threads:
        torch.set_num_threads(config.placement.threads)
    det = config.determinism
    if det.enabled:
        skip = role == "rollout_manager" and not det.seed_rollout_manager
        determinism.enable(config.job.seed, seed_rngs=not skip, attention=config.attention_backend,
                           fill_uninitialized_memory=det.fill_uninitialized_memory)
    if config.placement.device == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the actor's GPU
    return torch.device("cpu")
