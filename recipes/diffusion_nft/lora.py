"""The LoRA adapter on the SD3 transformer: added, listed, and switched off for the frozen reference."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.models import init_on

if TYPE_CHECKING:
    from recipes.diffusion_nft.config import ModelSettings

LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]


def add_lora(transformer: Any, model: ModelSettings) -> None:
    """The LoRA adapter (rank, alpha on the attention projections), initialised from
    ``seeds.weights(init_seed, "lora")``: the engines' and the trainer's start equal."""
    from peft import LoraConfig

    config = LoraConfig(r=model.lora_rank, lora_alpha=model.lora_alpha, init_lora_weights="gaussian",
                        target_modules=LORA_TARGETS)
    device = next(transformer.parameters()).device
    with init_on(device, seeds.weights(model.init_seed, "lora")):
        transformer.add_adapter(config)


def lora_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if "lora_" in n]


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Run the base model (the frozen reference) without touching requires_grad.

    peft's disable_adapters() also flips requires_grad of every adapter, which FSDP2 would
    see mid-step; the layers' own switch is all a forward needs.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False
