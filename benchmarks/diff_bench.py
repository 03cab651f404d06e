"""Wall time and peak RSS of `detaudit diff` on two 200,000-line runs.

Each run: 200,000 lines, rollout lines (10 series) and train lines (20 series) interleaved
1:1, plus perf/* keys (excluded). The second run differs in one train series from the
middle on, so the diff does real work. Goal on a 2-core machine: <= 2 s and <= 300 MB.

    python benchmarks/diff_bench.py [--lines 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROLLOUT = [f"rollout/reward/raw_{k}" for k in ("mean", "median", "std", "min", "max")] + [
    f"rollout/stat_{i}" for i in range(5)]
TRAIN = [f"train/metric_{i:02d}" for i in range(20)]


# Runs `detaudit diff --json` as a child and reports its exit code and the peak RSS of
# the largest of its processes (the CLI, or a parallel parse worker).
MEASURE = """
import json, resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "detaudit", "diff", "--json", *sys.argv[1:]], capture_output=True, text=True)
report = json.loads(proc.stdout)
print(json.dumps({"code": proc.returncode, "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "compared": report["compared"], "mismatched": len(report["mismatched"])}))
"""


def write_run(path: Path, lines: int, diverge_at: int | None) -> None:
    rng = random.Random(0)
    with open(path, "w") as fh:
        for i in range(lines):
            step = i // 2
            if i % 2 == 0:
                obj = {"step_key": "rollout/step", "rollout/step": step}
                obj.update({k: rng.random() for k in ROLLOUT})
                obj["perf/rollout_time"] = rng.random() * 10
            else:
                obj = {"step_key": "train/step", "train/step": float(step)}
                obj.update({k: rng.random() for k in TRAIN})
                if diverge_at is not None and i >= diverge_at:
                    obj["train/metric_07"] += 1e-9
                obj["perf/train_step_time"] = rng.random()
            fh.write(json.dumps(obj) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        write_run(a, args.lines, None)
        write_run(b, args.lines, args.lines // 2)
        size = a.stat().st_size / 1e6
        print(f"detaudit diff: 2 runs x {args.lines} lines ({size:.1f} MB each)")
        for label, env in (("default (files parsed in parallel)", {}), ("one process (DETAUDIT_JOBS=1)", {"DETAUDIT_JOBS": "1"})):
            times, peaks = [], []
            for _ in range(args.repeat):
                started = time.perf_counter()
                # A fresh python measures each run's own peak (ru_maxrss of its largest process).
                proc = subprocess.run(
                    [sys.executable, "-c", MEASURE, str(a), str(b)], capture_output=True, text=True,
                    env={**os.environ, **env},
                )
                times.append(time.perf_counter() - started)
                out = json.loads(proc.stdout)
                assert out["code"] == 1, proc.stderr
                peaks.append(out["peak_mb"])
            print(f"  {label}: wall best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s "
                  f"(goal <= 2 s); peak RSS {max(peaks):.0f} MB (goal <= 300 MB); "
                  f"{out['compared']} series compared, {out['mismatched']} mismatched")


if __name__ == "__main__":
    main()
