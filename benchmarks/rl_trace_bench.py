"""Cost of ``--perturb-schedule`` and of ``trace --modules --parity``: one card run plain, under a
perturbed schedule (run 1's and run 2's), traced with ``--modules``, and traced with ``--modules``
and ``--parity`` (the two processes keep their module outputs), side by side in one run
(interleaved, ``--repeats`` rounds). The parity row is read against the ``modules`` row: what
keeping the outputs costs beyond the fingerprints; its size column is the values kept.

No goal is set for either (the issue asks for the figures): the perturbed schedule holds each
result of concurrent work back by up to half the work's time plus 0.25 s (at most 2 s), so its
cost is the number of such results on the critical path times their share; the parity capture
copies each kept module output of the two processes to disk. Besides a run's wall time (Ray's
start-up, seconds and noisy on a shared machine, dominates a tiny run), the loop's: the
recipe's own ``perf/rollout_wall_time``, summed over the rollouts (each rollout, its training
and the weight sync). Figures are printed, never asserted (compare the medians).

    PYTHONPATH=$PWD python benchmarks/rl_trace_bench.py [--repeats 1] [--modes plain,perturb-1,...]
        [--card recipes/sd3_flow_grpo_parity.toml] [--parity RolloutEngine:TrainActor] [-- EXTRA_ARGS]

The tiny NFT card for the schedule alone (3 rollouts):

    PYTHONPATH=$PWD python benchmarks/rl_trace_bench.py --card recipes/sd3_pickscore_nft.toml \
        --modes plain,perturb-1,perturb-2

On a GPU host (the GPU card's figure), e.g.:

    PYTHONPATH=$PWD python benchmarks/rl_trace_bench.py --card recipes/sd3_compress_flow_grpo_gpu.toml \\
        -- --train-batch-size 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from detaudit.data.card import load_card, run_argv, run_env  # noqa: E402
from detaudit.trace import PARITY_ENV, PERTURB_ENV, SITE_DIR, trace_env  # noqa: E402

MODES = ("plain", "perturb-1", "perturb-2", "modules", "modules+parity")


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def loop_seconds(metrics: Path) -> float:
    """The run's own ``perf/rollout_wall_time``, summed over its rollouts."""
    total = 0.0
    for line in metrics.read_text().splitlines():
        total += json.loads(line).get("perf/rollout_wall_time", 0.0)
    return total


def run_once(card_path: Path, mode: str, base: Path, index: int, parity: str,
             extra: list[str]) -> tuple[float, float, int]:
    card = load_card(card_path)
    workdir = base / f"{mode}-{index}"
    workdir.mkdir(parents=True)
    metrics = workdir / "metrics.jsonl"
    env = run_env(card, workdir, metrics, 0)
    if mode.startswith("perturb"):
        env[PERTURB_ENV] = mode.rpartition("-")[2]
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    elif mode.startswith("modules"):
        env = trace_env("modules", workdir / "trace", env, card=card.name)
        if mode.endswith("parity"):
            env[PARITY_ENV] = parity
    started = time.perf_counter()
    with open(workdir / "run.log", "wb") as log:
        proc = subprocess.run(run_argv(card, workdir, metrics) + extra, cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=card.timeout_s * 3)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed (exit {proc.returncode}); log {workdir / 'run.log'}")
    values = folder_size(workdir / "trace" / "values") if mode.endswith("parity") else folder_size(workdir / "trace")
    return wall, loop_seconds(metrics), values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", type=Path, default=REPO / "recipes" / "sd3_flow_grpo_parity.toml")
    parser.add_argument("--parity", default="RolloutEngine:TrainActor")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help=f"some of {', '.join(MODES)}")
    parser.add_argument("extra", nargs="*", help="arguments after -- go to the card's command")
    args = parser.parse_args()
    modes = tuple(m for m in MODES if m in args.modes.split(","))
    if "plain" not in modes:
        raise SystemExit("--modes must hold plain (the baseline)")
    base = Path(tempfile.mkdtemp(prefix="detaudit-rl-bench-"))
    walls: dict[str, list[float]] = {m: [] for m in modes}
    loops: dict[str, list[float]] = {m: [] for m in modes}
    sizes: dict[str, int] = {}
    for round_ in range(args.repeats):
        for mode in (modes if round_ % 2 == 0 else tuple(reversed(modes))):
            try:
                wall, loop, size = run_once(args.card, mode, base, round_, args.parity, args.extra)
            except SystemExit as failed:  # a loaded machine's Ray can time out starting: once more, said so
                print(f"round {round_ + 1} {mode}: {failed}; once more", flush=True)
                wall, loop, size = run_once(args.card, mode, base, round_ + args.repeats, args.parity, args.extra)
            walls[mode].append(wall)
            loops[mode].append(loop)
            sizes[mode] = size
            print(f"round {round_ + 1} {mode:15s} {wall:7.1f} s wall, loop {loop:6.2f} s", flush=True)
    plain_wall, plain_loop = statistics.median(walls["plain"]), statistics.median(loops["plain"])
    modules_loop = statistics.median(loops["modules"]) if "modules" in modes else None
    print(f"\n{args.card.name} {' '.join(args.extra)}, {args.repeats} round(s), runs in {base}")
    print(f"{'mode':15s} {'median wall':>12s} {'vs plain':>9s} {'median loop':>12s} {'vs plain':>9s} "
          f"{'vs modules':>11s} {'trace/values':>13s}")
    for mode in modes:
        wall, loop = statistics.median(walls[mode]), statistics.median(loops[mode])
        against = f"{loop / modules_loop:10.3f}x" if mode.startswith("modules") and modules_loop else f"{'':>11s}"
        size = f"{sizes.get(mode, 0) / 1e6:10.2f} MB" if mode.startswith("modules") else f"{'':>13s}"
        print(f"{mode:15s} {wall:10.1f} s {wall / plain_wall:8.3f}x {loop:10.2f} s {loop / plain_loop:8.3f}x "
              f"{against} {size}")
    print("loop: the recipe's perf/rollout_wall_time summed (rollouts, training, weight syncs; Ray's start-up "
          "left out); perturb-N: schedule N of --perturb-schedule (1 and 2 mirrored); modules+parity vs modules: "
          "the cost of keeping the two processes' module outputs; its size: the values kept")


if __name__ == "__main__":
    main()
