"""A test-only recipe for ``trace --modules --parity``: one small model, built alike and fed the
same inputs, in a multiprocessing child named ``engine`` and in the main process (the trainer).
``--engine-autocast bf16`` runs the child's forward under ``torch.autocast`` (the bug: an engine
forward in another precision than the trainer's). Writes one metric to $DETAUDIT_METRICS_JSONL.
"""

import argparse
import json
import multiprocessing
import os

import torch


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def forward(autocast: bool) -> torch.Tensor:
    model = build()
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(x)


def engine(autocast: bool) -> None:
    forward(autocast)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine-autocast", choices=["none", "bf16"], default="none")
    args = parser.parse_args()
    child = multiprocessing.get_context("spawn").Process(target=engine, args=(args.engine_autocast == "bf16",),
                                                        name="engine")
    child.start()
    child.join()
    out = forward(False)
    with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
        fh.write(json.dumps({"step": 0, "out": float(out.sum())}) + "\n")
