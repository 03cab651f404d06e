"""Model FLOPs of the SD3 MMDiT, for model FLOP utilisation (MFU).

Counted analytically from the config (matmul FLOPs = 2 x multiply-adds), so the number
does not depend on which kernels ran. Per joint block, every token of both streams goes
through q/k/v/out projections (4 d^2) and an MLP of ratio 4 (8 d^2): 12 d^2 multiply-adds;
joint attention adds 2 N^2 d (scores and values). Dual-attention blocks (SD3.5) add an
image-only attention: 4 d^2 per image token and 2 N_img^2 d. The last block's text stream
stops after its q/k/v (``context_pre_only``). Patch and context embeddings, the output
projection and the adaLN modulation are counted too; norms, activations and LoRA are not
(each < 1% at SD3.5-medium shapes).

A DiffusionNFT train timestep is counted as 4 forwards: v_theta, v_old, v_ref, and the
backward through frozen weights (activation gradients only, ~1 forward).
"""

from __future__ import annotations

from typing import Any


def transformer_forward_flops(config: Any, batch: int, image_tokens: int, text_tokens: int,
                              attention: bool = True) -> float:
    """FLOPs of one SD3 transformer forward over ``batch`` samples (``attention=False``: the
    projections only, which is what torch's FlopCounterMode sees on CPU's math SDPA)."""
    att = 1 if attention else 0
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    d = get("num_attention_heads") * get("attention_head_dim")
    layers = get("num_layers")
    dual = len(tuple(get("dual_attention_layers", ()) or ()))
    n = image_tokens + text_tokens
    patch = get("patch_size")
    macs = image_tokens * get("in_channels") * patch * patch * d  # patch embedding
    macs += text_tokens * get("joint_attention_dim") * d  # context embedder
    macs += image_tokens * d * patch * patch * get("out_channels")  # proj_out
    for layer in range(layers):
        last = layer == layers - 1
        macs += (9 if layer < dual else 6) * d * d + (2 if last else 6) * d * d  # adaLN, per sample
        last = layer == layers - 1
        text_macs = 3 * d * d if last else 12 * d * d
        macs += image_tokens * 12 * d * d + text_tokens * text_macs
        macs += att * 2 * n * n * d  # joint attention: QK^T and AV
        if layer < dual:
            macs += image_tokens * 4 * d * d + att * 2 * image_tokens * image_tokens * d
    return 2.0 * macs * batch


def image_tokens(config: Any, latent_size: int) -> int:
    patch = config.get("patch_size") if isinstance(config, dict) else config.patch_size
    return (latent_size // patch) ** 2
