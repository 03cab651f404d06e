"""What the GPU probes share: the recipe's transformer with its LoRA, set up as the train actor
sets it up at world size 1, random inputs of a 512x512 rollout, and kernel classes for profiles.

Imported by benchmarks/gpu_attention_probe.py and benchmarks/gpu_compile_probe.py (this folder is
on their sys.path); tests/test_gpu_cost.py runs it on the CPU with the tiny preset.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.diffusion_nft.config import JobConfig, parse_args  # noqa: E402
from recipes.diffusion_nft.flops import image_tokens  # noqa: E402
from recipes.diffusion_nft.lora import add_lora, lora_parameters  # noqa: E402
from recipes.diffusion_nft.models import build_transformer  # noqa: E402

TEXT_TOKENS = 333  # 77 CLIP + 256 T5 tokens


def lora_transformer(device: torch.device, preset: str = "sd35m-shapes",
                     dtype: torch.dtype = torch.bfloat16) -> tuple[Any, list[torch.nn.Parameter], JobConfig]:
    """(model, its LoRA parameters, the preset's job config): base frozen, LoRA trainable, every
    parameter cast to ``dtype`` as the train actor does at world size 1."""
    cfg = parse_args(["--preset", preset, "--device", device.type])
    model = build_transformer(preset, cfg.model.init_seed, device)
    model.requires_grad_(False)
    add_lora(model, cfg.model)
    lora = [p for _, p in lora_parameters(model)]
    for p in lora:
        p.requires_grad_(True)
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model, lora, cfg


def latent_size(cfg: JobConfig) -> int:
    return cfg.rollout.resolution // 8


def image_token_count(model: Any, cfg: JobConfig) -> int:
    return image_tokens(model.config, latent_size(cfg))


def transformer_inputs(model: Any, cfg: JobConfig, batch: int, gen: torch.Generator, device: torch.device,
                       dtype: torch.dtype = torch.bfloat16, text_tokens: int = TEXT_TOKENS,
                       timestep_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Random latents, text embeddings, pooled embeddings and timesteps (in [0, 1000)) from ``gen``.

    ``timestep_dtype`` None: float32 timesteps scaled on the device; else scaled on the CPU and
    cast, as the train actor's mixed precision does.
    """
    config, latent = model.config, latent_size(cfg)
    inputs = {
        "hidden_states": torch.randn(batch, config.in_channels, latent, latent, generator=gen).to(device, dtype),
        "encoder_hidden_states": torch.randn(batch, text_tokens, config.joint_attention_dim,
                                             generator=gen).to(device, dtype),
        "pooled_projections": torch.randn(batch, config.pooled_projection_dim, generator=gen).to(device, dtype),
    }
    if timestep_dtype is None:
        inputs["timestep"] = torch.rand(batch, generator=gen).to(device) * 1000
    else:
        inputs["timestep"] = (torch.rand(batch, generator=gen) * 1000).to(device, timestep_dtype)
    return inputs


def kernel_class(name: str) -> str:
    """A CUDA kernel's class in a profile, from its name."""
    low = name.lower()
    if "flash" in low or "fmha" in low or "attention" in low or "sdpa" in low:
        return "attention"
    if any(k in low for k in ("gemm", "nvjet", "xmma", "cutlass", "matmul", "sm90", "ampere_", "s16816")):
        return "gemm"
    if "triton" in low:
        return "triton (fused by inductor)"
    if "softmax" in low:
        return "softmax (math attention)"
    if "norm" in low:
        return "norm"
    if any(k in low for k in ("elementwise", "vectorized", "unrolled", "reduce", "copy", "fill", "cat")):
        return "elementwise/copy/reduce"
    return "other"
