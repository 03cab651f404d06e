"""Wall time, CPU time and peak RSS of `detaudit diff` on two 200,000-line runs, this checkout side by
side with a reference commit (default 08d5094, before issue #39's exactness work), in one run.

Each run: 200,000 lines, rollout lines (10 series) and train lines (20 series) interleaved
1:1, plus perf/* keys (excluded). The second run differs in one train series from the
middle on, so the diff does real work. Goals on a 2-core machine: <= 2 s and <= 300 MB, and
no slower than the reference measured in the same run (issue #39: exact numbers without losing
speed).

The reference's ``detaudit/`` is extracted with ``git archive`` into a temporary folder and run
with PYTHONPATH (no checkout is touched). The two alternate, run by run, so that load from other
processes falls on both alike; each figure is the fastest of ``--repeat`` runs (the least
disturbed), the median beside it. CPU seconds (user + system of the process and its parse
workers) are less sensitive to a busy machine than wall seconds. Measure on a quiet machine
(or under the project's heavy-job lock) and repeat.

    python benchmarks/diff_bench.py [--lines 200000] [--repeat 5] [--reference REV | --no-reference]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "08d5094"  # main before issue #39; its diff was measured 1.4x faster than the checkout of the issue

ROLLOUT = [f"rollout/reward/raw_{k}" for k in ("mean", "median", "std", "min", "max")] + [
    f"rollout/stat_{i}" for i in range(5)]
TRAIN = [f"train/metric_{i:02d}" for i in range(20)]


# Runs `detaudit diff --json` as a child and reports its exit code, its CPU seconds and the peak
# RSS of the largest of its processes (the CLI, or a parallel parse worker).
MEASURE = """
import json, os, resource, subprocess, sys
import detaudit
proc = subprocess.run([sys.executable, "-m", "detaudit", "diff", "--json", *sys.argv[1:]], capture_output=True, text=True)
report = json.loads(proc.stdout)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": proc.returncode, "peak_mb": usage.ru_maxrss / 1024, "cpu": usage.ru_utime + usage.ru_stime,
                  "compared": report["compared"], "mismatched": len(report["mismatched"]),
                  "loaded_from": os.path.dirname(detaudit.__file__)}))
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


def extract(rev: str, into: Path) -> Path:
    """``detaudit/`` at ``rev``, from ``git archive`` (the working tree is not touched)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "detaudit"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(code: Path | None, a: Path, b: Path, env: dict[str, str]) -> dict:
    """One `detaudit diff` of the code under ``code`` (None: this checkout, as installed)."""
    full = {**os.environ, **env}
    full.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode compiled once, as an install has it
    if code is not None:
        full["PYTHONPATH"] = os.pathsep.join([str(code), full.get("PYTHONPATH", "")])
    else:
        full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")])
    started = time.perf_counter()
    # cwd outside the checkout: `python -c` / `-m` put the working folder first on sys.path, which
    # from the repository root would load this checkout's detaudit/ in place of the reference's.
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(a), str(b)], capture_output=True, text=True, env=full,
                          cwd=a.parent)
    wall = time.perf_counter() - started
    assert proc.returncode == 0 and proc.stdout, proc.stderr
    out = json.loads(proc.stdout)
    assert out["code"] == 1, proc.stderr
    assert out["loaded_from"] == str((code or REPO) / "detaudit"), out["loaded_from"]
    return {**out, "wall": wall}


def _best_median(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[0], ordered[len(ordered) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference", default=REFERENCE, help="commit to compare with (default %(default)s)")
    parser.add_argument("--no-reference", action="store_true", help="measure this checkout alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        write_run(a, args.lines, None)
        write_run(b, args.lines, args.lines // 2)
        codes: dict[str, Path | None] = {"this checkout": None}
        if not args.no_reference:
            codes[f"reference {args.reference}"] = extract(args.reference, Path(tmp) / "reference")
        size = a.stat().st_size / 1e6
        print(f"detaudit diff: 2 runs x {args.lines} lines ({size:.1f} MB each), best / median of {args.repeat}, "
              f"{os.cpu_count()} CPUs")
        for label, env in (("default (files parsed in parallel)", {}), ("one process (DETAUDIT_JOBS=1)", {"DETAUDIT_JOBS": "1"})):
            runs: dict[str, list[dict]] = {name: [] for name in codes}
            for _ in range(args.repeat):
                for name, code in codes.items():  # alternating: load falls on both alike
                    runs[name].append(measure(code, a, b, env))
            print(f"  {label}:")
            wall_best, cpu_best = {}, {}
            for name, measured in runs.items():
                wall, wall_median = _best_median([m["wall"] for m in measured])
                cpu, cpu_median = _best_median([m["cpu"] for m in measured])
                wall_best[name], cpu_best[name] = wall, cpu
                last = measured[-1]
                print(f"    {name:22s} wall {wall:.2f} s (median {wall_median:.2f}), CPU {cpu:.2f} s (median {cpu_median:.2f}); "
                      f"peak RSS {max(m['peak_mb'] for m in measured):.0f} MB; "
                      f"{last['compared']} series compared, {last['mismatched']} mismatched")
            if len(wall_best) == 2:
                (mine, ref), (mine_cpu, ref_cpu) = wall_best.values(), cpu_best.values()
                print(f"    this checkout / reference: {mine / ref:.2f}x wall, {mine_cpu / ref_cpu:.2f}x CPU "
                      "(goal <= 1.00x; and <= 2 s, <= 300 MB)")


if __name__ == "__main__":
    main()
