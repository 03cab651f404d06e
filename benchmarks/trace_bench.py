"""Cost of ``--trace``: the tiny CPU recipe untraced, with the RNG ledger, with module
fingerprints alone (``DETAUDIT_TRACE_OPS=0``), and with module fingerprints and the torch ops
between modules (what ``--trace=modules`` does), side by side in one run (interleaved,
``--repeats`` rounds), plus the size of the traces and the number of draws, module calls and
ops fingerprinted. The cost of the ops is the ``modules`` row against ``modules-no-ops``.

Goals: RNG ledger <= 1.05x the untraced wall time, module fingerprints (with ops) <= 1.5x, the
trace of a 3-rollout run <= 5 MB. Figures are printed, never asserted (a shared machine's
timings are noisy; compare the medians).

    PYTHONPATH=$PWD python benchmarks/trace_bench.py [--repeats 1] [--card recipes/sd3_pickscore_nft.toml]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from detaudit.data.card import load_card, run_argv, run_env  # noqa: E402
from detaudit.trace import OPS_ENV, trace_env  # noqa: E402

MODES = ("off", "rng", "modules-no-ops", "modules")
GOALS = {"rng": 1.05, "modules": 1.5}


MICRO = """
import time, torch
x = torch.empty(64)
for _ in range(200):
    torch.randperm(10); x.uniform_()
t0 = time.perf_counter()
for _ in range({n}):
    torch.randperm(10)
    x.uniform_()
print((time.perf_counter() - t0) / (2 * {n}))
"""


def per_draw_seconds(mode: str, base: Path, n: int = 3000) -> float:
    """Seconds per global draw (torch.randperm and Tensor.uniform_), traced or not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_TRACE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if mode != "off":
        env = trace_env(mode, base / f"micro-{mode}", env)
    out = subprocess.run([sys.executable, "-c", MICRO.format(n=n)], env=env, capture_output=True, text=True,
                         check=True, timeout=600).stdout
    return float(out.strip())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(card_path: Path, mode: str, base: Path, index: int) -> tuple[float, int, int, float, dict[str, int]]:
    card = load_card(card_path)
    workdir = base / f"{mode}-{index}"
    workdir.mkdir(parents=True)
    metrics = workdir / "metrics.jsonl"
    env = run_env(card, workdir, metrics, 0)
    if mode != "off":
        env = trace_env(mode.removesuffix("-no-ops"), workdir / "trace", env, card=card.name)
        if mode.endswith("-no-ops"):
            env[OPS_ENV] = "0"
    started = time.perf_counter()
    cpu_before = children_cpu()
    with open(workdir / "run.log", "wb") as log:
        proc = subprocess.run(run_argv(card, workdir, metrics), cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=card.timeout_s * 2)
    wall = time.perf_counter() - started
    cpu = children_cpu() - cpu_before  # the run and the descendants it reaped
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed (exit {proc.returncode}); log {workdir / 'run.log'}")
    files = list((workdir / "trace").glob("*.jsonl")) if mode != "off" else []
    counts = {"draw": 0, "module": 0, "op": 0}
    for f in files:
        for line in open(f, encoding="utf-8"):
            record = json.loads(line)
            kind = record["type"]
            if kind in counts:
                counts[kind] += 1
            elif kind == "chain" and record.get("final"):
                counts[record["kind"]] += record["count"]
    return wall, sum(f.stat().st_size for f in files), len(files), cpu, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", type=Path, default=REPO / "recipes" / "sd3_pickscore_nft.toml")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="detaudit-trace-bench-"))
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    sizes: dict[str, tuple[int, int]] = {}
    counts: dict[str, dict[str, int]] = {}
    for round_ in range(args.repeats):
        order = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            wall, size, files, cpu, count = run_once(args.card, mode, base, round_)
            walls[mode].append(wall)
            cpus[mode].append(cpu)
            sizes[mode] = (size, files)
            counts[mode] = count
            print(f"round {round_ + 1} {mode:14s} {wall:7.1f} s wall, {cpu:7.1f} s CPU", flush=True)
    base_wall = statistics.median(walls["off"])
    print(f"\n{args.card.name}, {args.repeats} round(s), runs in {base}")
    base_cpu = statistics.median(cpus["off"])
    print(f"{'mode':14s} {'median wall':>12s} {'vs untraced':>12s} {'median CPU':>11s} {'vs untraced':>12s} {'goal':>6s} "
          f"{'trace size':>12s} {'files':>6s} {'draws':>7s} {'modules':>8s} {'ops':>7s}")
    for mode in MODES:
        wall, cpu = statistics.median(walls[mode]), statistics.median(cpus[mode])
        size, files = sizes.get(mode, (0, 0))
        goal = f"{GOALS[mode]:.2f}x" if mode in GOALS else ""
        count = counts.get(mode, {})
        print(f"{mode:14s} {wall:10.1f} s {wall / base_wall:11.3f}x {cpu:9.1f} s {cpu / base_cpu:11.3f}x {goal:>6s} "
              f"{size / 1e6:9.3f} MB {files:6d} {count.get('draw', 0):7d} {count.get('module', 0):8d} "
              f"{count.get('op', 0):7d}")
    ops_wall = statistics.median(walls["modules"]) - statistics.median(walls["modules-no-ops"])
    ops_cpu = statistics.median(cpus["modules"]) - statistics.median(cpus["modules-no-ops"])
    print(f"torch ops between modules: {counts.get('modules', {}).get('op', 0)} fingerprinted, "
          f"{ops_wall:+.1f} s wall, {ops_cpu:+.1f} s CPU (modules vs modules-no-ops)")
    print("trace size goal: <= 5 MB for the 3-rollout run")
    plain, traced = per_draw_seconds("off", base), per_draw_seconds("rng", base)
    draws = counts.get("rng", {}).get("draw", 0)
    extra = (traced - plain) * draws
    print(f"per global draw: {plain * 1e6:.1f} us untraced, {traced * 1e6:.1f} us traced (+{(traced - plain) * 1e6:.1f} us); "
          f"x {draws} draws = {extra:.2f} s of the untraced {base_wall:.1f} s wall "
          f"({1 + extra / base_wall:.4f}x: the ledger's cost without the machine's noise)")


if __name__ == "__main__":
    main()
