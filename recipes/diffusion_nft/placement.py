"""Where a run's processes go: its Ray (a local instance of its own, or the cluster of the Ray job
it runs in), and each actor's share of the GPUs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.env import determinism
from recipes.diffusion_nft.config import JobConfig
from recipes.diffusion_nft.ports import file_rendezvous

RECIPE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds `recipes/`
# Ray's job supervisor sets this in the environment of a job's entrypoint (the driver), and so in
# every process the entrypoint starts: the mark of running inside a Ray job
# (ray._private.runtime_env.constants.RAY_JOB_CONFIG_JSON_ENV_VAR; tests/test_pipeline.py checks the name).
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def cluster_address(config: JobConfig, environ: dict[str, str] | None = None) -> str | None:
    """The Ray cluster this run joins, or None: it starts a Ray of its own.

    ``--ray-address`` names one. Otherwise a run joins only the cluster of the Ray job it runs
    in (``detaudit record --cluster``: the job's driver runs the card), whose address Ray's job
    supervisor puts in ``RAY_ADDRESS``. A ``RAY_ADDRESS`` from anywhere else (a shell that talks
    to some cluster, a ``ray start`` on this machine) is not a request to run there.
    """
    env = os.environ if environ is None else environ
    if config.ray.address:
        return config.ray.address
    if RAY_JOB_ENV in env:
        address = env.get("RAY_ADDRESS")
        if not address:
            raise SystemExit(f"this run is a Ray job ({RAY_JOB_ENV} is set) but RAY_ADDRESS is not: "
                             "pass --ray-address")
        return address
    return None


@dataclass(frozen=True)
class RaySession:
    gpus: int  # GPUs this run may use
    joined: bool  # a cluster (True) or a Ray of its own (False)


def start_ray(config: JobConfig) -> RaySession:
    """``ray.init`` with the runtime env every worker needs (under --deterministic-mode: seeded by
    the worker hook); on a joined cluster, this run's GPUs are the driver's own."""
    import ray

    env_vars = {"PYTHONPATH": os.pathsep.join(p for p in [RECIPE_ROOT, os.environ.get("PYTHONPATH", "")] if p)}
    if config.determinism.enabled:
        # ray.init draws from Python's random (`detaudit record --trace` names the draw): seeded first.
        determinism.seed_python_and_numpy(config.job.seed)
        runtime_env = determinism.ray_runtime_env(config.job.seed, env_vars=env_vars,
                                                  attention=config.attention_backend)
    else:
        runtime_env = {"env_vars": env_vars}
    address = cluster_address(config)
    # Ray starts before this process imports torch (seconds on a cold disk): the driver runs no
    # torch code of its own, and the rest of its deterministic set-up happens before any result
    # comes back. Ray counts the GPUs itself (CUDA_VISIBLE_DEVICES, else the driver's NVML).
    if address:
        # A Ray job (`detaudit record --cluster`): the job's entrypoint holds this run's CPUs
        # and GPUs; the actors run in that reservation (see start_actors).
        import torch

        gpus = torch.cuda.device_count() if config.placement.device == "cuda" else 0
        if gpus:
            runtime_env["env_vars"]["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True, configure_logging=False)
        return RaySession(gpus, joined=True)
    on_gpu = config.placement.device == "cuda"
    # No prestarted workers: Ray starts one per CPU for tasks when the driver connects, but every
    # actor gets a worker of its own, so on 2 cores they only took ~1.5 s of CPU from the actors'
    # start-up (perf/ray_python_workers counts the workers a run started).
    ray.init(address="local", num_cpus=config.ray.num_cpus, num_gpus=None if on_gpu else 0,
             runtime_env=runtime_env, include_dashboard=False, log_to_driver=True, configure_logging=False,
             object_store_memory=(config.ray.object_store_mb_gpu if on_gpu else config.ray.object_store_mb_cpu) * 1024**2,
             _system_config={"prestart_worker_first_driver": False})
    return RaySession(int(ray.cluster_resources().get("GPU", 0)), joined=False)


def gpu_shares(config: JobConfig, gpus: int) -> dict[str, float]:
    """GPUs per actor kind. Colocated: engine i shares train GPU i; reward on its own if free."""
    placement = config.placement
    if placement.device != "cuda" or gpus == 0:
        return {"train": 0, "engine": 0, "reward": 0}
    train_gpus = placement.train_actors
    if placement.colocate:
        used = train_gpus
        share = placement.colocated_share
        shares = {"train": share, "engine": share * train_gpus / placement.rollout_engines}
    else:
        used = train_gpus + placement.rollout_engines
        shares = {"train": 1.0, "engine": 1.0}
    own_reward = placement.reward_gpu if placement.reward_gpu is not None else gpus > used
    if own_reward and gpus <= used:
        raise SystemExit("--reward-gpu needs a GPU beyond the train and engine GPUs")
    shares["reward"] = 1.0 if own_reward else placement.shared_reward_share
    if not own_reward and placement.colocate:
        # Leave room on the shared GPU for the reward actor's small share.
        shares["train"] = shares["engine"] = placement.shared_gpu_share * max(1, train_gpus // placement.rollout_engines)
    return shares


@dataclass
class Actors:
    trainers: list[Any]
    engines: list[Any]
    reward: Any
    manager: Any

    def named(self) -> dict[str, Any]:
        """Every actor by the name its start-up marks go under (``train0``, ``engine0``, ``reward``, ``manager``)."""
        return {**{f"train{rank}": t for rank, t in enumerate(self.trainers)},
                **{f"engine{i}": e for i, e in enumerate(self.engines)}, "reward": self.reward, "manager": self.manager}


def start_actors(config: JobConfig, session: RaySession, rendezvous_dir: str) -> Actors:
    """Create the actors with their GPU shares; the manager gets the engines and the reward.
    The train ranks meet in a file store in RENDEZVOUS_DIR (new for this run, on this node).

    On a joined cluster the driver is a job whose entrypoint already holds the run's GPUs.
    Asking Ray for them again would need twice the GPUs, so the actors ask for none, run on the
    driver's node and see the driver's GPUs (CUDA_VISIBLE_DEVICES in the runtime env): the same
    layout as a local run.
    """
    import ray

    from recipes.diffusion_nft.actors import engine, manager, reward, sglang_engine, trainer

    shares = gpu_shares(config, session.gpus)
    place: dict[str, Any] = {}
    if session.joined:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        shares = {kind: 0 for kind in shares}
        place = {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}
    # Spelled out per class (no helper) so that `detaudit scan-rng` sees every actor.
    Engine = ray.remote(num_cpus=0, num_gpus=shares["engine"], **place)(engine.RolloutEngine)
    if config.rollout.engine == "sglang":
        Engine = ray.remote(num_cpus=0, num_gpus=shares["engine"], **place)(sglang_engine.SGLangRolloutEngine)
    Reward = ray.remote(num_cpus=0, num_gpus=shares["reward"], **place)(reward.RewardActor)
    Train = ray.remote(num_cpus=0, num_gpus=shares["train"], **place)(trainer.TrainActor)
    manager_env = None
    if not config.determinism.seed_rollout_manager:
        # Reproduce the real bug: this actor's worker hook leaves its RNGs unseeded.
        manager_env = {"env_vars": {determinism.SKIP_SEED_ENV: "1"}}
    Manager = ray.remote(num_cpus=0, runtime_env=manager_env, **place)(manager.RolloutManager)
    world = config.placement.train_actors
    rendezvous = file_rendezvous(rendezvous_dir)
    trainers = [Train.remote(config, rank, world, rendezvous) for rank in range(world)]
    engines = [Engine.remote(config, i) for i in range(config.placement.rollout_engines)]
    reward_actor = Reward.remote(config)
    return Actors(trainers, engines, reward_actor, Manager.remote(config, engines, reward_actor))
