"""What the SD3.5-medium-shape recipe needs in GPU memory, estimated on the CPU (meta tensors: no
memory, no compute), so that a device call only confirms it.

    PYTHONPATH=$PWD python benchmarks/gpu_memory_estimate.py [--micro-batch 32] [--sample-batch 32]

Prints, per model the actors build (engine: CLIP-L, CLIP-G, T5-XXL, VAE, transformer; trainer:
transformer + LoRA; reward: PickScore ViT-H/14), its parameters and their bytes in the dtype it
runs in; and the trainer's activations saved for the backward per sample at 512x512, with and
without activation checkpointing (saved tensors counted at each op that saves them: views of one
tensor saved by several ops count each time, so this is an upper bound), measured at batch 1 and
2 (the difference is the per-sample cost). The engine's and reward's activations are transient
(no-grad) and not estimated; the device call measures every process's peak
(``perf/memory/*``, ``benchmarks/gpu_cost.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GIB = 2**30


def params(module: object) -> int:
    return sum(p.numel() for p in module.parameters())  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batch", type=int, default=32, help="Trainer samples per forward/backward.")
    args = parser.parse_args()

    import torch
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import (
        CLIPConfig,
        CLIPModel,
        CLIPTextConfig,
        CLIPTextModelWithProjection,
        T5Config,
        T5EncoderModel,
    )

    from recipes.diffusion_nft.config import parse_args
    from recipes.diffusion_nft.lora import add_lora
    from recipes.diffusion_nft.models import SHAPES

    shapes = SHAPES["sd35m-shapes"]
    with torch.device("meta"):
        parts = {
            "clip_l": CLIPTextModelWithProjection(CLIPTextConfig(**shapes.clip_l)),
            "clip_g": CLIPTextModelWithProjection(CLIPTextConfig(**shapes.clip_g)),
            "t5": T5EncoderModel(T5Config(**shapes.t5)),
            "vae": AutoencoderKL(**shapes.vae),
            "transformer": SD3Transformer2DModel(**shapes.transformer),
            "pickscore": CLIPModel(CLIPConfig(
                text_config=dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                                 num_hidden_layers=24, vocab_size=49408, max_position_embeddings=77),
                vision_config=dict(hidden_size=1280, intermediate_size=5120, num_attention_heads=16,
                                   num_hidden_layers=32, image_size=224, patch_size=14), projection_dim=1024)),
        }
    config = parse_args(["--preset", "sd35m-shapes"]).model
    add_lora(parts["transformer"], config)
    lora = sum(p.numel() for n, p in parts["transformer"].named_parameters() if "lora" in n)
    print(f"{'model':14}{'params':>10}{'GiB bf16':>10}{'GiB fp32':>10}")
    for name, module in parts.items():
        n = params(module)
        print(f"{name:14}{n / 1e9:9.3f}B{n * 2 / GIB:10.2f}{n * 4 / GIB:10.2f}")
    engine = sum(params(parts[k]) for k in ("clip_l", "clip_g", "t5", "vae", "transformer")) * 2 / GIB
    trainer_weights = params(parts["transformer"]) * 2 / GIB + lora * 4 * 4 / GIB  # bf16 + fp32 master, grad, Adam m, v
    reward = params(parts["pickscore"]) * 4 / GIB
    print(f"weights per process: engine {engine:.1f} GiB (bf16), trainer {trainer_weights:.1f} GiB "
          f"(bf16 + LoRA {lora / 1e6:.1f}M in fp32 with grads and Adam), reward {reward:.1f} GiB (fp32)")

    def saved_per_sample(checkpointing: bool) -> float:
        model = parts["transformer"].to(torch.bfloat16)
        model.requires_grad_(False)
        for n, p in model.named_parameters():
            p.requires_grad_("lora" in n)
        model.gradient_checkpointing = False
        if checkpointing:
            model.enable_gradient_checkpointing()
        model.train()
        sizes = []
        for batch in (1, 2):
            seen: list[int] = []

            def pack(t: torch.Tensor, seen: list[int] = seen) -> torch.Tensor:
                if not isinstance(t, torch.nn.Parameter):
                    seen.append(t.numel() * t.element_size())
                return t

            x = torch.empty(batch, 16, 64, 64, device="meta", dtype=torch.bfloat16)
            text = torch.empty(batch, shapes.max_sequence_length + 77, 4096, device="meta", dtype=torch.bfloat16)
            pooled = torch.empty(batch, 2048, device="meta", dtype=torch.bfloat16)
            t = torch.empty(batch, device="meta", dtype=torch.bfloat16)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                model(hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled, timestep=t,
                      return_dict=False)
            sizes.append(sum(seen))
        return (sizes[1] - sizes[0]) / GIB

    plain, ckpt = saved_per_sample(False), saved_per_sample(True)
    blocks = len(parts["transformer"].transformer_blocks)
    m = args.micro_batch
    print(f"trainer activations saved per sample (upper bound): {plain:.2f} GiB plain, {ckpt:.3f} GiB with "
          f"activation checkpointing (+ one block's recompute at a time, <= {plain / blocks:.2f} GiB/sample)")
    print(f"micro-batch {m}: trainer {trainer_weights + m * plain:.0f} GiB plain, "
          f"{trainer_weights + m * (ckpt + plain / blocks):.0f} GiB with checkpointing; engine >= {engine:.0f} GiB, "
          f"reward >= {reward:.0f} GiB; one 80 GB H100 holds about 79 GiB")


if __name__ == "__main__":
    main()
