"""The driver: start Ray and the actors, then rollout -> train -> sync weights, rollout by rollout.

Every number a standard compares comes from the actors; the driver orders their calls (the order
is part of the result: see ``--compile-blocks``) and writes the metrics.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from typing import Any

from detaudit.env import determinism
from recipes.diffusion_nft.config import JobConfig, parse_args
from recipes.diffusion_nft.metrics_log import MetricsLog, metrics_paths
from recipes.diffusion_nft.perf import memory_metrics, python_workers_started, startup_timeline
from recipes.diffusion_nft.placement import Actors, RaySession, start_actors, start_ray


def log(message: str) -> None:
    print(f"[diffusion_nft] {message}", file=sys.stderr, flush=True)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    started = time.perf_counter()
    driver = {"start": time.time()}  # wall-clock marks, comparable with the actors' StartupMarks
    config = config.replace("placement", device=resolve_device(config.placement.device))
    import ray

    driver["imports"] = time.time()
    paths = metrics_paths(config.job.metrics_jsonl)
    if not paths:
        log("no metrics path: set --metrics-jsonl or $DETAUDIT_METRICS_JSONL")
    metrics = MetricsLog(paths)
    session = start_ray(config)
    log("Ray: joined the cluster of this run's Ray job or --ray-address" if session.joined
        else "Ray: a local instance of this run's own")
    driver["ray_init"] = time.time()
    try:
        # On the driver's node, like every train rank (start_actors); removed with the run.
        with tempfile.TemporaryDirectory(prefix="nft-rendezvous-", ignore_cleanup_errors=True) as rendezvous_dir:
            return train(config, ray, session, metrics, started, driver, rendezvous_dir)
    finally:
        metrics.close()
        ray.shutdown()


def train(config: JobConfig, ray: Any, session: RaySession, metrics: MetricsLog, started: float,
          driver: dict[str, float], rendezvous_dir: str) -> int:
    actors = start_actors(config, session, rendezvous_dir)
    driver["actors_created"] = time.time()
    if config.determinism.enabled:  # while the actors start
        determinism.enable(config.job.seed, attention=config.attention_backend,
                           fill_uninitialized_memory=config.determinism.fill_uninitialized_memory)
    named = actors.named()
    marks = dict(zip(named, ray.get([a.ready.remote() for a in named.values()]), strict=True))
    driver["actors_ready"] = time.time()
    load_times = [m["ready"] - m["setup"] for who, m in marks.items() if who != "manager"]
    weights_dtype = ray.get(actors.engines[0].weights_dtype.remote())
    sync_weights(ray, actors, weights_dtype)
    startup = time.perf_counter() - started
    driver["synced"] = time.time()
    placement = config.placement
    log(f"ready in {startup:.1f}s (slowest model load {max(load_times):.1f}s); device {placement.device}, "
        f"attention {config.attention_backend if config.determinism.enabled else 'any'}, "
        f"{placement.train_actors} train actor(s), {placement.rollout_engines} engine(s), "
        f"algorithm {config.job.algorithm}, reward {config.reward.kind}")
    opt_step = 0
    for rollout in range(config.job.rollouts):
        t0 = time.perf_counter()
        batch_ref, rollout_ref = actors.manager.generate.options(num_returns=2).remote(rollout)
        rollout_metrics = ray.get(rollout_ref)
        # --compile-blocks: rollout 0 was sampled eagerly; the engines compile now, while the
        # trainer trains on it (if another rollout follows). Every later load_lora/generate
        # reaches them after this call.
        compile_now = config.compile.blocks and rollout == 0 and config.job.rollouts > 1
        compiling = [e.compile_transformer.remote() for e in actors.engines] if compile_now else []
        if rollout == 0:
            rollout_metrics["perf/startup_time"] = startup
            rollout_metrics["perf/model_load_time"] = max(load_times)
            rollout_metrics["perf/ray_init_time"] = driver["ray_init"] - driver["start"]
            rollout_metrics.update(startup_timeline(driver, marks))
            workers = None if session.joined else python_workers_started(ray)  # a cluster's logs hold other jobs'
            if workers is not None:
                rollout_metrics["perf/ray_python_workers"] = workers
        metrics.write("rollout/step", rollout, rollout_metrics)
        t_train = time.perf_counter()
        results = ray.get([t.train.remote(batch_ref, rollout) for t in actors.trainers])[0]
        t_sync = time.perf_counter()
        for step_metrics in results:
            opt_step += 1
            metrics.write("train/step", opt_step, step_metrics)
        compile_s = max(ray.get(compiling)) if compiling else None
        sync_weights(ray, actors, weights_dtype)
        wall = time.perf_counter() - t0
        phases = {"perf/rollout_call_time": t_train - t0, "perf/train_call_time": t_sync - t_train,
                  "perf/sync_time": t0 + wall - t_sync}
        if compile_s is not None:
            phases["perf/engine_compile_time"] = compile_s
        if placement.device == "cuda":  # each GPU process's peak memory so far
            on_gpu = {who: a for who, a in named.items() if who != "manager"}
            phases.update(memory_metrics(dict(zip(on_gpu, ray.get([a.peak_memory.remote() for a in on_gpu.values()]),
                                                  strict=True))))
        metrics.write("perf/step", rollout, {"perf/rollout_wall_time": wall, **phases,
                                              "perf/time_since_start": time.perf_counter() - started})
        last = results[-1]
        log(f"rollout {rollout + 1}/{config.job.rollouts}: reward {rollout_metrics['rollout/reward/raw_mean']:.6f}, "
            f"loss {last['train/loss']:.6f}, grad_norm {_f(last['train/grad_norm'])}, {wall:.1f}s")
    ray.get([t.shutdown.remote() for t in actors.trainers])
    if config.rollout.engine == "sglang":  # its servers end cleanly, every process's trace whole
        ray.get([e.shutdown.remote() for e in actors.engines])
    log(f"done in {time.perf_counter() - started:.1f}s")
    return 0


def sync_weights(ray: Any, actors: Actors, dtype: Any) -> None:
    """Old-policy LoRA weights from the train ranks to every rollout engine (in the engines' ``dtype``)."""
    state = ray.get([t.old_lora_state.remote(dtype) for t in actors.trainers])[0]
    state_ref = ray.put(state)
    ray.get([e.load_lora.remote(state_ref) for e in actors.engines])


def _f(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def main() -> None:
    sys.exit(run())
