"""Measured dense matmul rate of this GPU (the MFU denominator): 8192^3 products, bf16 and fp16.

    python benchmarks/matmul_peak.py   ->  {"bf16_tflops": ..., "fp16_tflops": ..., "gpu": ...}
"""

from __future__ import annotations

import json

import torch


def rate(dtype: torch.dtype, n: int = 8192, iters: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * iters / (start.elapsed_time(end) / 1000) / 1e12


if __name__ == "__main__":
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "bf16_tflops": rate(torch.bfloat16),
                      "fp16_tflops": rate(torch.float16), "torch": torch.__version__, "cuda": torch.version.cuda}))
