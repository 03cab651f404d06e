"""A test-only recipe that compiles: a small function through torch.compile (Inductor's C++ on
the CPU), its compile artifacts loaded and saved through ``detaudit.env.compile_cache`` as the
reference recipe's actors do. Writes the function's output bits as metrics, and what the
compile cache did (and the compile's cache hits) to ``compile.json`` in its work dir."""

import json
import os

import torch
import torch._dynamo.utils

from detaudit.env import compile_cache

status = compile_cache.load("toy")


@torch.compile(dynamic=False)
def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w).sin().sum(dim=1) * 1.0001


gen = torch.Generator().manual_seed(0)
x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as out:
    for i in range(3):
        values = step(x + i, w)
        out.write(json.dumps({"step_key": "rollout/step", "rollout/step": i,
                              "rollout/reward/raw_mean": float(values.mean()),
                              "train/loss": float(values.max())}) + "\n")
saved = compile_cache.save("toy")
counters = torch._dynamo.utils.counters["inductor"]
with open(os.path.join(os.environ["DETAUDIT_WORKDIR"], "compile.json"), "w") as fh:
    json.dump({"status": status, "saved": str(saved) if saved else None, "hits": counters["fxgraph_cache_hit"],
               "misses": counters["fxgraph_cache_miss"]}, fh)
