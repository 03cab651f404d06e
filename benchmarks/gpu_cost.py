"""What a rollout-and-train loop of the reference pipeline costs, deterministic and not, side by side.

    python benchmarks/gpu_cost.py [--rollouts 3] [--repeats 3] [--parallel] [--out FILE] [-- RECIPE FLAGS]

Runs `python -m recipes.diffusion_nft` twice from this process (SD3.5-medium shapes, 512x512,
8 prompts x 8 samples, bf16 on CUDA, transformer blocks compiled, by default): once with --deterministic-mode and once without,
one after the other on the first visible GPU, or with --parallel at the same time on GPUs 0 and 1;
``--repeats N`` does that N times (pairs interleaved). Then it measures the GPU's dense bf16
matmul rate (benchmarks/matmul_peak.py), prints the runs side by side, and writes the JSON the
pipeline-speed issue names, with every repeat, each run's start-up timeline and each GPU
process's peak memory (``perf/memory/*``): by default ``benchmarks/results/<gpu>_cost.json``
(h100, h200: from the device's name).

MFU = model FLOPs of a loop (perf/rollout_flops + perf/train_flops, recipes/diffusion_nft/flops.py)
/ the loop's wall time (perf/rollout_wall_time) / the measured matmul rate; loops after the first
(warm-up) are averaged. det_overhead = deterministic / non-deterministic loop wall time.
first_rollout_s = seconds from start until the first rollout's images were generated
(start-up + the first rollout's generation), of the deterministic run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE_DEFAULTS = ["--preset", "sd35m-shapes", "--precision", "bf16", "--device", "cuda", "--no-fill-uninitialized-memory",
                   "--compile-blocks"]


def loop_figures(metrics: Path, peak_tflops: float | None) -> dict[str, float | None]:
    """Per-run figures from a recipe's metrics JSONL (loops after the first averaged)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rollouts = [r for r in rows if r["step_key"] == "rollout/step"]
    trains = [r for r in rows if r["step_key"] == "train/step"]
    loops = [r for r in rows if r["step_key"] == "perf/step"]
    if not loops:
        raise SystemExit(f"{metrics}: no finished rollout-and-train loop")
    skip = 1 if len(loops) > 1 else 0

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    loop_s = mean([p["perf/rollout_wall_time"] for p in loops[skip:]])
    rollout_s = mean([r["perf/rollout_time"] for r in rollouts[skip : len(loops)]])
    train_s = mean([t["perf/train_step_time"] for t in trains[skip : len(loops)]])
    flops = mean([r["perf/rollout_flops"] for r in rollouts[skip : len(loops)]]) + mean(
        [t["perf/train_flops"] for t in trains[skip : len(loops)]])
    images = rollouts[0]["rollout/reward/raw_num_samples"]
    pairs = mean([t["perf/train_pairs"] for t in trains[skip : len(loops)]])
    first = rollouts[0]
    tflops = flops / loop_s / 1e12

    def phase(rows_: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows_[skip : len(loops)] if key in r]
        return mean(values) if values else None

    # Where a loop's wall time goes: the driver's calls, the engine's phases, the trainer's step.
    breakdown = {key.removeprefix("perf/"): phase(loops, key)
                 for key in ("perf/rollout_call_time", "perf/train_call_time", "perf/sync_time")}
    breakdown.update({key.removeprefix("perf/"): phase(rollouts, key)
                      for key in ("perf/engine_encode_time", "perf/engine_denoise_time", "perf/engine_decode_time")})
    memory: dict[str, dict[str, float]] = {}  # process -> peak GiB over the whole run (the last loop's "so far")
    for key, value in loops[-1].items():
        if key.startswith("perf/memory/") and key.endswith("_gib"):
            who, _, kind = key.removeprefix("perf/memory/").removesuffix("_gib").rpartition("_peak_")
            memory.setdefault(who, {})[kind] = value
    return {
        "loops_averaged": len(loops) - skip,
        "startup_s": first["perf/startup_time"],
        "ray_init_s": first.get("perf/ray_init_time"),
        "slowest_model_load_s": first.get("perf/model_load_time"),
        "first_rollout_s": first["perf/startup_time"] + first["perf/rollout_time"],
        "first_generation_s": first["perf/rollout_time"],
        "engine_compile_s": loops[0].get("perf/engine_compile_time"),
        # seconds from the driver's start to each start-up mark of each process, in time order
        "startup_timeline_s": dict(sorted(((k.removeprefix("perf/startup/"), v) for k, v in first.items()
                                           if k.startswith("perf/startup/")), key=lambda kv: kv[1])),
        "first_loop_done_s": loops[0]["perf/time_since_start"],
        "loop_s": loop_s,
        "generation_s": rollout_s,
        "reward_s": mean([r["perf/reward_time"] for r in rollouts[skip : len(loops)]]),
        "train_s": train_s,
        "images_per_s": images / rollout_s,
        "train_pairs_per_s": pairs / train_s,
        "pflop_per_loop": flops / 1e15,
        "tflops": tflops,
        "mfu": tflops / peak_tflops if peak_tflops else None,
        "loop_breakdown_s": breakdown,
        "memory_peak_gib": memory,
    }


def start_run(work: Path, name: str, flags: list[str], gpu: str | None) -> tuple[subprocess.Popen, Path, Path]:
    metrics, log = work / f"{name}.jsonl", work / f"{name}.log"
    env = dict(os.environ, MILES_METRICS_JSONL=str(metrics), PYTHONPATH=os.pathsep.join(
        p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "recipes.diffusion_nft", *flags], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    return proc, metrics, log


def finish(proc: subprocess.Popen, log: Path, name: str, timeout: float) -> None:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"{name} run: no result within {timeout:.0f} s; log {log}") from None
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"{name} run exited {code}; log {log}:\n{tail}")


def matmul_peak_tflops() -> float:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from matmul_peak import rate

    return rate(torch.bfloat16)


def commit_of_checkout() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def _cell(value: float | None) -> str:
    return "-" if value is None else str(round(value, 4))


def gpu_kind(name: str) -> str:
    """``h100`` / ``h200`` / ... from a device name (``NVIDIA H100 80GB HBM3``); ``gpu`` otherwise."""
    for word in name.lower().replace("-", " ").split():
        if len(word) >= 4 and word[0] in "abhlv" and word[1:].isdigit():
            return word
    return "gpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=3, help="Rollouts per run (the first is warm-up).")
    parser.add_argument("--parallel", action="store_true", help="Both runs at once, on GPUs 0 and 1.")
    parser.add_argument("--peak-tflops", type=float, help="Matmul rate for MFU (default: measured here, bf16 8192^3).")
    parser.add_argument("--commit", help="Commit to record (default: git rev-parse HEAD of this checkout).")
    parser.add_argument("--workdir", type=Path, help="Where the runs' metrics and logs go (default: a temp dir).")
    parser.add_argument("--from-metrics", type=Path, help="Run nothing: read DIR/{deterministic,nondeterministic}*.jsonl "
                        "(runs a device call made but had no time to report; MFU only with --peak-tflops).")
    parser.add_argument("--gpu", help="With --from-metrics: the GPU the runs ran on, and --torch its torch.")
    parser.add_argument("--torch", help="With --from-metrics: the runs' torch version.")
    parser.add_argument("--timeout", type=float, default=900, help="Seconds per run.")
    parser.add_argument("--repeats", type=int, default=1, help="Pairs of runs (deterministic, then not).")
    parser.add_argument("--out", type=Path, help="Default: benchmarks/results/<gpu>_cost.json (h100, h200, ...).")
    parser.add_argument("recipe", nargs="*", help="Flags after -- go to every recipe run (after the defaults).")
    args = parser.parse_args()
    work = args.from_metrics or args.workdir or Path(tempfile.mkdtemp(prefix="gpu-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    common = [*RECIPE_DEFAULTS, "--rollouts", str(args.rollouts), *args.recipe]
    runs = {"deterministic": [*common, "--deterministic-mode"], "nondeterministic": common}
    started = time.perf_counter()
    results: dict[str, list[tuple[Path, Path]]] = {name: [] for name in runs}
    for repeat in range(0 if args.from_metrics else args.repeats):
        tag = f"-{repeat + 1}" if args.repeats > 1 else ""
        if args.parallel:
            procs = {name: start_run(work, name + tag, flags, str(i)) for i, (name, flags) in enumerate(runs.items())}
            for name, (proc, metrics, log) in procs.items():
                finish(proc, log, name, args.timeout)
                results[name].append((metrics, log))
        else:
            for name, flags in runs.items():
                proc, metrics, log = start_run(work, name + tag, flags, None)
                finish(proc, log, name, args.timeout)
                results[name].append((metrics, log))
    if args.from_metrics:
        for name in runs:
            results[name] = [(m, m) for m in sorted(args.from_metrics.glob(f"{name}*.jsonl"))]
        if not results["deterministic"] or len(results["deterministic"]) != len(results["nondeterministic"]):
            raise SystemExit(f"{args.from_metrics}: no pairs of deterministic*/nondeterministic*.jsonl")
    peak = args.peak_tflops or (None if args.from_metrics else matmul_peak_tflops())
    every = {name: [loop_figures(metrics, peak) for metrics, _ in done] for name, done in results.items()}
    figures = {name: runs_[-1] for name, runs_ in every.items()}
    det, nondet = figures["deterministic"], figures["nondeterministic"]
    overheads = [d["loop_s"] / n["loop_s"] for d, n in zip(every["deterministic"], every["nondeterministic"], strict=True)]
    import torch

    gpu = args.gpu or (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    report = {
        "mfu_deterministic": det["mfu"],
        "mfu_nondeterministic": nondet["mfu"],
        "mfu_nondeterministic_each": [f["mfu"] for f in every["nondeterministic"]],
        "det_overhead": max(overheads),
        "det_overhead_each": overheads,
        "first_rollout_s": max(f["first_rollout_s"] for f in every["deterministic"]),
        "first_rollout_s_each": [f["first_rollout_s"] for f in every["deterministic"]],
        "loop_s_deterministic": det["loop_s"],
        "loop_s_nondeterministic": nondet["loop_s"],
        "images_per_s": nondet["images_per_s"],
        "train_pairs_per_s": nondet["train_pairs_per_s"],
        "memory_peak_gib": {name: f["memory_peak_gib"] for name, f in figures.items()},
        "torch": args.torch or torch.__version__,
        "from_metrics": str(args.from_metrics) if args.from_metrics else None,
        "gpu": gpu,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit or commit_of_checkout(),
        "peak_tflops": peak,  # None: not measured (MFU null)
        "parallel": args.parallel,
        "repeats": len(every["deterministic"]),
        "recipe_flags": common,
        "runs": figures,
        "every_run": every,
        "bench_wall_s": time.perf_counter() - started,
    }
    out = args.out or REPO / "benchmarks" / "results" / f"{gpu_kind(gpu)}_cost.json"
    print(f"{'':22}{'deterministic':>16}{'not deterministic':>20}")
    for key in ("startup_s", "ray_init_s", "slowest_model_load_s", "first_generation_s", "first_rollout_s", "engine_compile_s",
                "first_loop_done_s", "loop_s", "generation_s", "reward_s", "train_s",
                "images_per_s", "train_pairs_per_s", "pflop_per_loop", "tflops", "mfu"):
        a, b = det[key], nondet[key]
        print(f"{key:22}{_cell(a):>16}{_cell(b):>20}")
    for key in det["loop_breakdown_s"]:
        a, b = det["loop_breakdown_s"][key], nondet["loop_breakdown_s"][key]
        print(f"  {key:20}{_cell(a):>16}{_cell(b):>20}")
    print("start-up of the deterministic run (s from the driver's start):")
    for mark, at in det["startup_timeline_s"].items():
        print(f"  {at:8.2f}  {mark}")
    print("peak GPU memory per process (GiB allocated / reserved), deterministic run:")
    for who, peak_gib in det["memory_peak_gib"].items():
        print(f"  {who:10} {peak_gib.get('allocated', 0):8.1f} {peak_gib.get('reserved', 0):8.1f}")
    each = ", ".join(f"{o:.3f}" for o in overheads)
    print(f"det_overhead {report['det_overhead']:.3f} worst of [{each}]  (peak {peak or 0:.0f} TFLOP/s bf16; runs in {work})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
