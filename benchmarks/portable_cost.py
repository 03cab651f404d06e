"""What the portable CPU profile costs: wall time of the tiny NFT card, native vs portable, in one run.

    python benchmarks/portable_cost.py [--repeat 1]

Runs `recipes/sd3_pickscore_nft.toml` (native kernels, PIL preprocessing) and
`recipes/sd3_pickscore_nft_portable.toml` (profile x86_64-v1: baseline kernels, one thread per
library, torch preprocessing) through `detaudit.run.card_runs.run_card`, the seam `record` runs
them through (no doctor, no trace, no probe), alternating, and prints each run's wall time, the medians and their ratio. The two cards
run the same recipe and settings otherwise. Times depend on the machine and its load: the
printed load average says how busy it was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the recipes package, as the cards' pythonpath has it
CARDS = {"native": ROOT / "recipes" / "sd3_pickscore_nft.toml",
         "portable": ROOT / "recipes" / "sd3_pickscore_nft_portable.toml"}


def one_run(card_path: Path, workdir: Path) -> float:
    """Wall seconds of one run of the card, as record runs it (its env, its profile), unprobed."""
    from detaudit.data.card import load_card
    from detaudit.run.card_runs import run_card

    started = time.perf_counter()
    plan = run_card(load_card(card_path), 1, workdir=workdir, probe=False, label="bench")
    wall = time.perf_counter() - started
    state = plan.states[0]
    if not state.ok:
        raise SystemExit(f"{card_path.name}: the run failed ({state.status}); log {state.spec.log_path}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CARDS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, card in CARDS.items():
                times[name].append(one_run(card, Path(tmp) / f"{name}{i}"))
                print(f"{name:9s} run {i + 1}: {times[name][-1]:6.1f} s wall", flush=True)
    native, portable = statistics.median(times["native"]), statistics.median(times["portable"])
    print(f"median over {args.repeat}: native {native:.1f} s, portable {portable:.1f} s, "
          f"portable / native {portable / native:.2f}x (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
