"""A stand-in for a training run: metrics JSONL, one line per step, values fixed by the step."""

import json
import os
import random
from pathlib import Path


def train(path: Path, steps: int = 5, scale: float = 1.0, key: str = "train/loss") -> Path:
    bump = float(os.environ.get("DEMO_BUMP", "0"))
    lines = []
    for step in range(steps):
        line = {"step_key": "step", "step": step, key: scale / (step + 3) + bump,
                "perf/time_s": 0.25 * step}
        if not os.environ.get("DEMO_DROP"):
            line["train/grad_norm"] = scale * (step + 1) / 7
        if os.environ.get("DEMO_EXTRA"):
            line["train/extra"] = step * 0.5
        if os.environ.get("DEMO_UNSEEDED"):  # a draw from a generator nobody seeded: runs disagree
            line["train/noise"] = random.random()
        lines.append(json.dumps(line))
    if os.environ.get("DEMO_MALFORMED"):
        lines[2] = '{"step": 2, "train/loss": oops}'
    path.write_text("".join(line + "\n" for line in lines))
    return path
