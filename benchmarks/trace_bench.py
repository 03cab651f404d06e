"""Cost of ``--trace``: the tiny CPU recipe untraced, with the RNG ledger, and with module
fingerprints, side by side in one run (interleaved, ``--repeats`` rounds), plus the size of
the traces.

Goals: RNG ledger <= 1.05x the untraced wall time, module fingerprints <= 1.5x, the trace of
a 3-rollout run <= 5 MB. Figures are printed, never asserted (a shared machine's timings
are noisy; compare the medians).

    PYTHONPATH=$PWD python benchmarks/trace_bench.py [--repeats 1] [--card recipes/sd3_pickscore_nft.toml]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from detaudit.card import load_card, run_argv, run_env  # noqa: E402
from detaudit.trace import trace_env  # noqa: E402

MODES = ("off", "rng", "modules")
GOALS = {"rng": 1.05, "modules": 1.5}


def run_once(card_path: Path, mode: str, base: Path, index: int) -> tuple[float, int, int]:
    card = load_card(card_path)
    workdir = base / f"{mode}-{index}"
    workdir.mkdir(parents=True)
    metrics = workdir / "metrics.jsonl"
    env = run_env(card, workdir, metrics, 0)
    if mode != "off":
        env = trace_env(mode, workdir / "trace", env)
    started = time.perf_counter()
    with open(workdir / "run.log", "wb") as log:
        proc = subprocess.run(run_argv(card, workdir, metrics), cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=card.timeout_s * 2)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed (exit {proc.returncode}); log {workdir / 'run.log'}")
    files = list((workdir / "trace").glob("*.jsonl")) if mode != "off" else []
    return wall, sum(f.stat().st_size for f in files), len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", type=Path, default=REPO / "recipes" / "sd3_pickscore_nft.toml")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="detaudit-trace-bench-"))
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    sizes: dict[str, tuple[int, int]] = {}
    for round_ in range(args.repeats):
        order = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            wall, size, files = run_once(args.card, mode, base, round_)
            walls[mode].append(wall)
            sizes[mode] = (size, files)
            print(f"round {round_ + 1} {mode:8s} {wall:7.1f} s", flush=True)
    base_wall = statistics.median(walls["off"])
    print(f"\n{args.card.name}, {args.repeats} round(s), runs in {base}")
    print(f"{'mode':10s} {'median wall':>12s} {'vs untraced':>12s} {'goal':>6s} {'trace size':>12s} {'files':>6s}")
    for mode in MODES:
        wall = statistics.median(walls[mode])
        size, files = sizes.get(mode, (0, 0))
        goal = f"{GOALS[mode]:.2f}x" if mode in GOALS else ""
        print(f"{mode:10s} {wall:10.1f} s {wall / base_wall:11.3f}x {goal:>6s} {size / 1e6:9.3f} MB {files:6d}")
    print("trace size goal: <= 5 MB for the 3-rollout run")


if __name__ == "__main__":
    main()
