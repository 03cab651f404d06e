"""The recipe's transformer eager or with its blocks compiled: time, compile time, bits, profile.

    python benchmarks/gpu_compile_probe.py [--compile] [--mode deterministic|nondeterministic] [--out probe.json]

On one CUDA GPU, with the `sd35m-shapes` transformer (LoRA added, parameters cast to bf16 as the
train actor does at world size 1), at 512x512 (1024 image tokens + 333 text tokens), set up as an
actor of the recipe would be for ``--mode`` (deterministic: flash attention, no fill of
uninitialised memory, as the GPU cards):

1. with ``--compile``, `recipes.diffusion_nft.models.compile_blocks` as the actors call it, and
   the wall time of the first no-grad forward, the first adapters-off forward and the first
   fwd+bwd (each compiles its graphs);
2. no-grad forward at ``--nograd-batch`` (the engine's and the frozen predictions' batch) and
   fwd+bwd at ``--train-batch`` (LoRA gradients, as in training), with TFLOP/s from
   recipes/diffusion_nft/flops.py and the share of the measured peak (``--peak-tflops``);
3. SHA-256 of the no-grad output, of the fwd+bwd output and of every LoRA gradient, from fixed
   inputs: run the probe in two processes (with fresh TORCHINDUCTOR_CACHE_DIRs) and compare;
4. a profile of one fwd+bwd: GPU kernel time against wall time, and time by kernel class.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformer_probe import TEXT_TOKENS, image_token_count, kernel_class, lora_transformer, transformer_inputs  # noqa: E402

from detaudit.env import determinism  # noqa: E402
from recipes.diffusion_nft.flops import transformer_forward_flops  # noqa: E402
from recipes.diffusion_nft.lora import adapters_disabled  # noqa: E402
from recipes.diffusion_nft.models import compile_blocks  # noqa: E402


def digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--mode", choices=["deterministic", "nondeterministic"], default="deterministic")
    parser.add_argument("--nograd-batch", type=int, default=32)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=787.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    deterministic = args.mode == "deterministic"
    if deterministic:
        os.environ[determinism.SEED_ENV] = "42"
        os.environ[determinism.ATTENTION_ENV] = "flash"
        determinism.ray_worker_setup()
        determinism.enable(42, attention="flash", fill_uninitialized_memory=False)
    dev = torch.device("cuda")
    started = time.perf_counter()
    model, lora, cfg = lora_transformer(dev)
    build_s = time.perf_counter() - started
    if args.compile:
        compile_blocks(model, deterministic)
    config = model.config
    tokens = image_token_count(model, cfg)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def inputs(batch: int) -> dict[str, torch.Tensor]:
        return transformer_inputs(model, cfg, batch, gen, dev, timestep_dtype=torch.bfloat16)

    nograd_in, train_in = inputs(args.nograd_batch), inputs(args.train_batch)

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return model(**nograd_in, return_dict=False)[0]

    def forward_base() -> torch.Tensor:
        with torch.no_grad(), adapters_disabled(model):
            return model(**nograd_in, return_dict=False)[0]

    def fwd_bwd() -> tuple[torch.Tensor, list[torch.Tensor]]:
        for p in lora:
            p.grad = None
        out = model(**train_in, return_dict=False)[0]
        out.float().square().mean().backward()
        return out.detach(), [p.grad for p in lora]

    def first_call(fn) -> float:  # noqa: ANN001
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def timed(fn) -> float:  # noqa: ANN001
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / args.repeat

    report: dict[str, object] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "compile": args.compile, "mode": args.mode, "build_s": build_s,
                                 "inductor_deterministic": getattr(torch._inductor.config, "deterministic", None)
                                 if args.compile else None}
    report["first_forward_s"] = first_call(forward)
    report["first_forward_adapters_off_s"] = first_call(forward_base)
    report["first_fwd_bwd_s"] = first_call(fwd_bwd)
    fwd_flops = transformer_forward_flops(config, args.nograd_batch, tokens, TEXT_TOKENS)
    train_flops = 2 * transformer_forward_flops(config, args.train_batch, tokens, TEXT_TOKENS)
    fwd_s, base_s, train_s = timed(forward), timed(forward_base), timed(fwd_bwd)
    report.update({
        "forward_s": fwd_s, "forward_mfu": fwd_flops / fwd_s / 1e12 / args.peak_tflops,
        "forward_adapters_off_s": base_s, "forward_adapters_off_mfu": fwd_flops / base_s / 1e12 / args.peak_tflops,
        "fwd_bwd_s": train_s, "fwd_bwd_mfu": train_flops / train_s / 1e12 / args.peak_tflops,
    })
    out, grads = fwd_bwd()
    report["sha256"] = {"forward": digest([forward()]), "forward_adapters_off": digest([forward_base()]),
                        "fwd_bwd_output": digest([out]), "lora_grads": digest(grads)}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fwd_bwd()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    classes: dict[str, float] = {}
    count = 0
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        classes[kernel_class(e.key)] = classes.get(kernel_class(e.key), 0.0) + e.self_device_time_total
        count += e.count
    total = sum(classes.values())
    report["profile_fwd_bwd"] = {"wall_ms (profiled)": wall * 1000, "kernel_ms": total / 1000, "kernels": count,
                                 "by_class_pct": {k: round(100 * v / total, 1)
                                                  for k, v in sorted(classes.items(), key=lambda kv: -kv[1])}}
    print(json.dumps(report, indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
