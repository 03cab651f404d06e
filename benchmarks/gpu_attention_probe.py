"""Which SDPA kernel the recipe's transformer runs, whether it repeats bit for bit, and where the time goes.

    python benchmarks/gpu_attention_probe.py [--batch 16] [--out probe.json]

On one CUDA GPU, with the `sd35m-shapes` transformer (LoRA added, parameters cast to bf16 as the
train actor does at world size 1), at 512x512 (1024 image tokens + 333 text tokens):

1. the dtype, layout and mask of q/k/v as they reach scaled_dot_product_attention (after the
   q/k RMS norm), and the attention kernels a profiler sees, per attention mode: the recipe's
   worker set-up (`determinism.ray_worker_setup`, then the actor's `enable`) for
   --deterministic-mode with --attention math / flash / any, and not deterministic;
2. two fwd+bwd runs from the same inputs per deterministic mode: output and LoRA gradients
   compared bit for bit;
3. forward (no grad) and fwd+bwd times per mode, with TFLOP/s from recipes/diffusion_nft/flops.py;
4. a profile of one deterministic fwd+bwd: CUDA time per kernel class (GEMM, attention,
   the rest) and the top kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformer_probe import TEXT_TOKENS, image_token_count, kernel_class, lora_transformer, transformer_inputs  # noqa: E402

from detaudit.env import determinism  # noqa: E402
from recipes.diffusion_nft.flops import transformer_forward_flops  # noqa: E402

MODES = ("math", "flash", "any", "nondeterministic")


def set_mode(mode: str) -> None:
    """Put this process where a recipe actor would be for ``mode``."""
    if mode == "nondeterministic":
        torch.use_deterministic_algorithms(False)
        determinism.set_attention_backends("any")
        return
    os.environ[determinism.SEED_ENV] = "42"
    os.environ[determinism.ATTENTION_ENV] = mode
    determinism.ray_worker_setup()  # the worker hook, as in every Ray worker
    determinism.enable(42, attention=mode)  # the actor's own set-up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    dev = torch.device("cuda")
    model, lora, cfg = lora_transformer(dev)
    config = model.config
    tokens = image_token_count(model, cfg)
    fwd_flops = transformer_forward_flops(config, args.batch, tokens, TEXT_TOKENS)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def inputs(batch: int) -> dict[str, torch.Tensor]:
        return transformer_inputs(model, cfg, batch, gen, dev)

    seen: list[dict[str, object]] = []
    original_sdpa = F.scaled_dot_product_attention

    def spy(*a, **kw):  # noqa: ANN002, ANN003
        if not seen:
            named = dict(zip(("query", "key", "value", "attn_mask"), a, strict=False), **kw)  # attn_mask may be a keyword
            q, k, v, mask = named["query"], named["key"], named["value"], named.get("attn_mask")
            seen.append({"q": [str(q.dtype), list(q.shape), list(q.stride())], "k": str(k.dtype), "v": str(v.dtype),
                         "mask": None if mask is None else list(mask.shape),
                         "is_causal": named.get("is_causal", False), "dropout_p": named.get("dropout_p", 0.0)})
        return original_sdpa(*a, **kw)

    def fwd_bwd(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        for p in lora:
            p.grad = None
        out = model(**x, return_dict=False)[0]
        out.float().square().mean().backward()
        return out.detach(), [p.grad.detach().clone() for p in lora]

    def timed(fn, repeat: int) -> float:  # noqa: ANN001
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / repeat / 1000

    report: dict[str, object] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "batch": args.batch, "tokens": [tokens, TEXT_TOKENS], "modes": {}}
    small = inputs(2)
    big = inputs(args.batch)
    for mode in MODES:
        set_mode(mode)
        entry: dict[str, object] = {
            "sdp_enabled": {b: getattr(torch.backends.cuda, f"{b}_sdp_enabled")()
                            for b in ("flash", "mem_efficient", "cudnn", "math")},
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        }
        seen.clear()
        F.scaled_dot_product_attention = spy
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                fwd_bwd(small)
                torch.cuda.synchronize()
        finally:
            F.scaled_dot_product_attention = original_sdpa
        entry["sdpa_inputs"] = seen[0] if seen else None
        names = {e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA}
        entry["attention_kernels"] = sorted(n[:120] for n in names if kernel_class(n) in ("attention",
                                                                                          "softmax (math attention)"))
        if mode != "nondeterministic":
            a_out, a_grads = fwd_bwd(small)
            b_out, b_grads = fwd_bwd(small)
            entry["bit_identical_fwd_bwd"] = bool(torch.equal(a_out, b_out)
                                                  and all(torch.equal(x, y) for x, y in zip(a_grads, b_grads, strict=True)))
        with torch.no_grad():
            fwd_s = timed(lambda: model(**big, return_dict=False), args.repeat)
        bwd_s = timed(lambda: fwd_bwd(big), args.repeat)
        entry.update({"forward_s": fwd_s, "forward_tflops": fwd_flops / fwd_s / 1e12,
                      "fwd_bwd_s": bwd_s, "fwd_bwd_tflops": 2 * fwd_flops / bwd_s / 1e12})
        report["modes"][mode] = entry
        print(mode, json.dumps(entry, indent=1), flush=True)
    set_mode("flash")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fwd_bwd(big)
        torch.cuda.synchronize()
    classes: dict[str, float] = {}
    kernels = []
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.self_device_time_total
        classes[kernel_class(e.key)] = classes.get(kernel_class(e.key), 0.0) + us
        kernels.append((us, e.count, e.key[:100]))
    total = sum(classes.values())
    report["profile_fwd_bwd_flash"] = {
        "total_ms": total / 1000,
        "by_class_pct": {k: round(100 * v / total, 1) for k, v in sorted(classes.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"ms": round(us / 1000, 2), "calls": n, "name": name}
                        for us, n, name in sorted(kernels, reverse=True)[:15]],
    }
    print(json.dumps(report["profile_fwd_bwd_flash"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
