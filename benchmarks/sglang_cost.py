"""What sglang as the rollout engine costs: the tiny NFT card with the built-in engine vs with sglang, in one run.

    python benchmarks/sglang_cost.py [--repeat 1]

Runs `recipes/sd3_pickscore_nft.toml` (the recipe's diffusers engine, in this interpreter) and
`recipes/sd3_pickscore_nft_sglang.toml` (an sglang diffusion server per engine actor, in the sglang
environment: `recipes/sglang/env.sh` first) through `detaudit.run.card_runs.run_card`, the seam
`record` runs them through (no doctor, no trace, no probe), alternating, and prints each run's wall
time and, from its metrics, its start-up (Ray, actors, the engine's model load: for sglang, saving
the model and the server's start) and its rollout time per rollout. Same job and seeds otherwise.
Times depend on the machine and its load: the printed load average says how busy it was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the recipes package, as the cards' pythonpath has it
CARDS = {"builtin": ROOT / "recipes" / "sd3_pickscore_nft.toml",
         "sglang": ROOT / "recipes" / "sd3_pickscore_nft_sglang.toml"}


def one_run(card_path: Path, workdir: Path) -> dict[str, float]:
    """Wall seconds of one run of the card, as record runs it, and its start-up and rollout times."""
    from detaudit.data.card import load_card
    from detaudit.run.card_runs import run_card

    started = time.perf_counter()
    plan = run_card(load_card(card_path), 1, workdir=workdir, probe=False, label="bench")
    wall = time.perf_counter() - started
    state = plan.states[0]
    if not state.ok:
        tail = "\n".join(state.spec.log_path.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"{card_path.name}: the run failed ({state.status}); the end of its log:\n{tail}")
    lines = [json.loads(line) for line in state.spec.metrics_path.read_text().splitlines() if line.strip()]
    values = [line for line in lines if "perf/startup_time" in line]
    rollouts = [line["perf/rollout_time"] for line in lines if "perf/rollout_time" in line]
    return {"wall": wall, "startup": values[0]["perf/startup_time"] if values else float("nan"),
            "rollout": statistics.median(rollouts) if rollouts else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CARDS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, card in CARDS.items():
                runs[name].append(one_run(card, Path(tmp) / f"{name}{i}"))
                r = runs[name][-1]
                print(f"{name:8s} run {i + 1}: {r['wall']:6.1f} s wall, start-up {r['startup']:5.1f} s, "
                      f"rollout {r['rollout']:5.2f} s (median of the run's rollouts)", flush=True)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall", "startup", "rollout")}
           for name, rs in runs.items()}
    b, s = med["builtin"], med["sglang"]
    print(f"median over {args.repeat}: wall builtin {b['wall']:.1f} s, sglang {s['wall']:.1f} s "
          f"({s['wall'] / b['wall']:.2f}x); start-up {b['startup']:.1f} s vs {s['startup']:.1f} s; "
          f"rollout {b['rollout']:.2f} s vs {s['rollout']:.2f} s ({s['rollout'] / b['rollout']:.2f}x) "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
