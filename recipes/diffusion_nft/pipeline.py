"""Orchestration: start Ray, place the actors, loop rollout -> train -> sync, write metrics."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.env import determinism
from recipes.diffusion_nft.config import JobConfig, parse_args

RECIPE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds `recipes/`


class MetricsLog:
    """Miles-style JSONL lines to every configured path (a tee), flushed per line."""

    def __init__(self, paths: list[Path]) -> None:
        import jsonlines

        self.writers = []
        for path in dict.fromkeys(paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            # Python's json writes NaN/Infinity literals, as miles does (detaudit reads both).
            self.writers.append(jsonlines.open(path, mode="w", flush=True, dumps=json.dumps))

    def write(self, step_key: str, step: int | float, values: dict[str, Any]) -> None:
        line = {"step_key": step_key, step_key: step, **values}
        for writer in self.writers:
            writer.write(line)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


def metrics_paths(args: JobConfig) -> list[Path]:
    paths = [args.metrics_jsonl] if args.metrics_jsonl else []
    for var in ("DETAUDIT_METRICS_JSONL", "MILES_METRICS_JSONL"):
        if os.environ.get(var):
            paths.append(Path(os.environ[var]))
    return paths


def log(message: str) -> None:
    print(f"[diffusion_nft] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_device(args: JobConfig) -> str:
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_shares(args: JobConfig, gpus: int) -> dict[str, float]:
    """GPUs per actor kind. Colocated: engine i shares train GPU i; reward on its own if free."""
    if args.device != "cuda" or gpus == 0:
        return {"train": 0, "engine": 0, "reward": 0}
    train_gpus = args.train_actors
    if args.colocate:
        used = train_gpus
        share = args.colocated_share
        shares = {"train": share, "engine": share * train_gpus / args.rollout_engines}
    else:
        used = train_gpus + args.rollout_engines
        shares = {"train": 1.0, "engine": 1.0}
    own_reward = args.reward_gpu if args.reward_gpu is not None else gpus > used
    if own_reward and gpus <= used:
        raise SystemExit("--reward-gpu needs a GPU beyond the train and engine GPUs")
    shares["reward"] = 1.0 if own_reward else args.shared_reward_share
    if not own_reward and args.colocate:
        # Leave room on the shared GPU for the reward actor's small share.
        shares["train"] = shares["engine"] = args.shared_gpu_share * max(1, train_gpus // args.rollout_engines)
    return shares


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    driver = {"start": time.time()}  # wall-clock marks, comparable with the actors' StartupMarks
    args = args.replace(device=resolve_device(args))
    import ray

    driver["imports"] = time.time()
    paths = metrics_paths(args)
    if not paths:
        log("no metrics path: set --metrics-jsonl or $DETAUDIT_METRICS_JSONL")
    metrics = MetricsLog(paths)
    env_vars = {"PYTHONPATH": os.pathsep.join(p for p in [RECIPE_ROOT, os.environ.get("PYTHONPATH", "")] if p)}
    if args.deterministic_mode:
        # ray.init draws from Python's random (`detaudit record --trace` names the draw): seeded first.
        determinism.seed_python_and_numpy(args.seed)
        runtime_env = determinism.ray_runtime_env(args.seed, env_vars=env_vars, attention=args.attention_backend)
    else:
        runtime_env = {"env_vars": env_vars}
    address = os.environ.get("RAY_ADDRESS")
    # Ray starts before this process imports torch (seconds on a cold disk): the driver runs no
    # torch code of its own, and the rest of its deterministic set-up (below) happens before any
    # result comes back. Ray counts the GPUs itself (CUDA_VISIBLE_DEVICES, else the driver's NVML).
    if address:
        # A Ray job (`detaudit record --cluster`): join that cluster. The job's entrypoint
        # holds this run's CPUs and GPUs; the actors run in that reservation (see start_actors).
        import torch

        gpus = torch.cuda.device_count() if args.device == "cuda" else 0
        if gpus:
            runtime_env["env_vars"]["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True, configure_logging=False)
    else:
        ray.init(num_cpus=args.num_cpus, num_gpus=None if args.device == "cuda" else 0, runtime_env=runtime_env,
                 include_dashboard=False, log_to_driver=True, configure_logging=False,
                 object_store_memory=(args.object_store_mb_cpu if args.device == "cpu" else args.object_store_mb_gpu) * 1024**2)
        gpus = int(ray.cluster_resources().get("GPU", 0))
    driver["ray_init"] = time.time()
    try:
        return _loop(args, ray, metrics, gpus, started, driver, joined=bool(address))
    finally:
        metrics.close()
        ray.shutdown()


@dataclass
class Actors:
    trainers: list[Any]
    engines: list[Any]
    reward: Any
    manager: Any


def start_actors(args: JobConfig, ray: Any, gpus: int, joined: bool = False) -> Actors:
    """Create the actors with their GPU shares; the manager gets the engines and the reward.

    ``joined``: the driver is a job on a shared cluster whose entrypoint already holds the
    run's GPUs. Asking Ray for them again would need twice the GPUs, so the actors ask for
    none, run on the driver's node and see the driver's GPUs (CUDA_VISIBLE_DEVICES in the
    runtime env): the same layout as a local run.
    """
    from recipes.diffusion_nft import actors

    shares = gpu_shares(args, gpus)
    place: dict[str, Any] = {}
    if joined:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        shares = {kind: 0 for kind in shares}
        place = {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}
    # Spelled out per class (no helper) so that `detaudit scan-rng` sees every actor.
    Engine = ray.remote(num_cpus=0, num_gpus=shares["engine"], **place)(actors.RolloutEngine)
    Reward = ray.remote(num_cpus=0, num_gpus=shares["reward"], **place)(actors.RewardActor)
    Train = ray.remote(num_cpus=0, num_gpus=shares["train"], **place)(actors.TrainActor)
    manager_env = None
    if args.no_seed_rollout_manager:
        # Reproduce the real bug: this actor's worker hook leaves its RNGs unseeded.
        manager_env = {"env_vars": {determinism.SKIP_SEED_ENV: "1"}}
    Manager = ray.remote(num_cpus=0, runtime_env=manager_env, **place)(actors.RolloutManager)
    port = free_port()
    trainers = [Train.remote(args, rank, args.train_actors, port) for rank in range(args.train_actors)]
    engines = [Engine.remote(args, i) for i in range(args.rollout_engines)]
    reward = Reward.remote(args)
    return Actors(trainers, engines, reward, Manager.remote(args, engines, reward))


def startup_timeline(driver: dict[str, float], actor_marks: dict[str, dict[str, float]]) -> dict[str, float]:
    """``perf/startup/<process>/<mark>``: seconds from the driver's start to each start-up mark
    (the driver's and every actor's), for the first rollout's metrics line."""
    start = driver["start"]
    named = {"driver": driver, **actor_marks}
    return {f"perf/startup/{who}/{mark}": round(t - start, 3) for who, marks in named.items()
            for mark, t in marks.items() if mark != "start"}


def _loop(args: JobConfig, ray: Any, metrics: MetricsLog, gpus: int, started: float, driver: dict[str, float],
          joined: bool = False) -> int:
    group = start_actors(args, ray, gpus, joined)
    trainers, engines, reward, manager = group.trainers, group.engines, group.reward, group.manager
    driver["actors_created"] = time.time()
    if args.deterministic_mode:  # while the actors start
        determinism.enable(args.seed, attention=args.attention_backend,
                           fill_uninitialized_memory=args.fill_uninitialized_memory)
    names = ([f"train{rank}" for rank in range(len(trainers))] + [f"engine{i}" for i in range(len(engines))]
             + ["reward", "manager"])
    marks = dict(zip(names, ray.get([a.ready.remote() for a in trainers + engines + [reward, manager]])))
    driver["actors_ready"] = time.time()
    load_times = [m["ready"] - m["setup"] for who, m in marks.items() if who != "manager"]
    weights_dtype = ray.get(engines[0].weights_dtype.remote())
    sync_weights(ray, trainers, engines, weights_dtype)
    startup = time.perf_counter() - started
    driver["synced"] = time.time()
    log(f"ready in {startup:.1f}s (slowest model load {max(load_times):.1f}s); device {args.device}, "
        f"attention {args.attention_backend if args.deterministic_mode else 'any'}, "
        f"{args.train_actors} train actor(s), {args.rollout_engines} engine(s), reward {args.reward}")
    opt_step = 0
    for rollout in range(args.rollouts):
        t0 = time.perf_counter()
        batch_ref, rollout_ref = manager.generate.options(num_returns=2).remote(rollout)
        rollout_metrics = ray.get(rollout_ref)
        # --compile-blocks: rollout 0 was sampled eagerly; the engines compile now, while the
        # trainer trains on it (if another rollout follows). Every later load_lora/generate
        # reaches them after this call.
        compile_now = args.compile_blocks and rollout == 0 and args.rollouts > 1
        compiling = [e.compile_transformer.remote() for e in engines] if compile_now else []
        if rollout == 0:
            rollout_metrics["perf/startup_time"] = startup
            rollout_metrics["perf/model_load_time"] = max(load_times)
            rollout_metrics["perf/ray_init_time"] = driver["ray_init"] - driver["start"]
            rollout_metrics.update(startup_timeline(driver, marks))
        metrics.write("rollout/step", rollout, rollout_metrics)
        t_train = time.perf_counter()
        results = ray.get([t.train.remote(batch_ref, rollout) for t in trainers])[0]
        t_sync = time.perf_counter()
        for step_metrics in results:
            opt_step += 1
            metrics.write("train/step", opt_step, step_metrics)
        compile_s = max(ray.get(compiling)) if compiling else None
        sync_weights(ray, trainers, engines, weights_dtype)
        wall = time.perf_counter() - t0
        phases = {"perf/rollout_call_time": t_train - t0, "perf/train_call_time": t_sync - t_train,
                  "perf/sync_time": t0 + wall - t_sync}
        if compile_s is not None:
            phases["perf/engine_compile_time"] = compile_s
        metrics.write("perf/step", rollout, {"perf/rollout_wall_time": wall, **phases,
                                              "perf/time_since_start": time.perf_counter() - started})
        last = results[-1]
        log(f"rollout {rollout + 1}/{args.rollouts}: reward {rollout_metrics['rollout/reward/raw_mean']:.6f}, "
            f"loss {last['train/loss']:.6f}, grad_norm {_f(last['train/grad_norm'])}, {wall:.1f}s")
    ray.get([t.shutdown.remote() for t in trainers])
    log(f"done in {time.perf_counter() - started:.1f}s")
    return 0


def sync_weights(ray: Any, trainers: list[Any], engines: list[Any], dtype: Any) -> None:
    """Old-policy LoRA weights from the train ranks to every rollout engine (in the engines' ``dtype``)."""
    state = ray.get([t.old_lora_state.remote(dtype) for t in trainers])[0]
    state_ref = ray.put(state)
    ray.get([e.load_lora.remote(state_ref) for e in engines])


def _f(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def main() -> None:
    sys.exit(run())
