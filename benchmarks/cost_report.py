"""Cost of a recipe run from its perf/* metrics: start-up vs per-rollout time, throughput, MFU.

    python benchmarks/cost_report.py METRICS.jsonl [--peak-tflops 790] [--skip-first]

MFU = model FLOPs (perf/rollout_flops + perf/train_flops, counted from the SD3 config by
recipes/diffusion_nft/flops.py) / wall time of the rollout-and-train loop / the GPU's
measured dense bf16 matmul rate (benchmarks/matmul_peak.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("metrics", type=Path)
    parser.add_argument("--peak-tflops", type=float, help="Measured matmul rate (TFLOP/s) for MFU.")
    parser.add_argument("--skip-first", action="store_true", help="Leave the first rollout out of the means (warm-up).")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.metrics.read_text().splitlines() if line.strip()]
    rollouts = [r for r in rows if r["step_key"] == "rollout/step"]
    trains = [r for r in rows if r["step_key"] == "train/step"]
    loops = [r for r in rows if r["step_key"] == "perf/step"]
    first = rollouts[0]
    start = 1 if args.skip_first and len(rollouts) > 1 else 0
    n = len(rollouts) - start

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    rollout_time = mean([r["perf/rollout_time"] for r in rollouts[start:]])
    train_time = mean([t["perf/train_step_time"] for t in trains[start:]])
    loop_time = mean([p["perf/rollout_wall_time"] for p in loops[start:]])
    images = first["rollout/reward/raw_num_samples"]
    pairs = mean([t["perf/train_pairs"] for t in trains[start:]])
    flops = mean([r["perf/rollout_flops"] for r in rollouts[start:]]) + mean([t["perf/train_flops"] for t in trains[start:]])
    total = loops[-1]["perf/time_since_start"]
    print(f"{args.metrics.name}: {len(rollouts)} rollouts, {images} images each ({'means over ' + str(n)})")
    print(f"  start-up to first rollout: {first['perf/startup_time']:.1f} s (slowest model load {first['perf/model_load_time']:.1f} s)")
    print(f"  first rollout generated at {first['perf/startup_time'] + first['perf/rollout_time']:.1f} s; "
          f"first rollout-and-train loop done at {loops[0]['perf/time_since_start']:.1f} s; run {total:.1f} s")
    print(f"  per rollout: loop {loop_time:.1f} s = generation {rollout_time:.1f} s + train {train_time:.1f} s + reward/sync")
    print(f"  throughput: {images / rollout_time:.2f} images/s in rollout, {pairs / train_time:.2f} train pairs/s")
    achieved = flops / loop_time / 1e12
    line = f"  model FLOPs per loop {flops / 1e15:.2f} PFLOP -> {achieved:.0f} TFLOP/s"
    if args.peak_tflops:
        line += f" = {100 * achieved / args.peak_tflops:.1f}% MFU of {args.peak_tflops:.0f} TFLOP/s"
    print(line)


if __name__ == "__main__":
    main()
