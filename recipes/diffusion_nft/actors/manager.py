"""The rollout manager: engines -> reward -> the algorithm's advantages and train data."""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.actors.common import setup_process
from recipes.diffusion_nft.algorithms import Algorithm
from recipes.diffusion_nft.config import ALGORITHM_MODULES, JobConfig
from recipes.diffusion_nft.perf import StartupMarks
from recipes.diffusion_nft.prompts import load_prompts, rollout_prompts


class RolloutManager:
    """Drives rollouts: engines -> reward -> advantages -> train data.

    NFT: per-sample train timesteps from ``torch.randperm`` on this process's global RNG.
    Flow-GRPO: group advantages over the recorded trajectories; no draw at all.
    """

    def __init__(self, config: JobConfig, engines: list[Any], reward_actor: Any) -> None:
        self.startup = StartupMarks()
        self.config = config
        # Under --deterministic-mode this seeds the actor's global torch RNG; with
        # --no-seed-rollout-manager it is left as torch seeded it at start-up: randomly.
        self.device = setup_process(config, "rollout_manager")
        self.startup.mark("setup")
        self.engines = engines
        self.reward_actor = reward_actor
        self.prompts = load_prompts(config.rollout.prompts)
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def generate(self, rollout: int) -> tuple[dict[str, Any], dict[str, float]]:
        import ray

        config = self.config
        algorithm: Algorithm = importlib.import_module(ALGORITHM_MODULES[config.job.algorithm])  # see algorithms/
        group_size = config.rollout.group_size
        started = time.perf_counter()
        chosen = rollout_prompts(self.prompts, rollout, config.rollout.prompts_per_rollout, config.job.seed)
        shards = [chosen[i :: len(self.engines)] for i in range(len(self.engines))]
        rollout_seed = seeds.rollout(config.job.seed, rollout)
        calls = {e.generate.remote(s, rollout_seed): s for e, s in zip(self.engines, shards, strict=True) if s}
        if config.inject.completion_order:  # --collect-in-completion-order: the bug, batched as they arrive
            arrived, pending = [], list(calls)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)  # detaudit: ignore[DA401] (the injected bug)
                arrived += ready
            shards = [calls[ref] for ref in arrived]
            outputs = ray.get(arrived)
        else:
            outputs = ray.get(list(calls))
        rollout_flops = sum(o["flops"] for o in outputs)
        phases = {f"perf/engine_{phase}_time": max(o["phase_times"].get(phase, 0.0) for o in outputs)
                  for phase in sorted({phase for o in outputs for phase in o["phase_times"]})}
        order = [p for s in shards if s for p in s]  # prompts in the order the outputs come
        keys = ("images", "prompt_embeds", "pooled", *algorithm.ROLLOUT_KEYS)
        batch = {key: torch.cat([o[key] for o in outputs]) for key in keys}
        prompts = [p for o in outputs for p in o["prompts"]]
        sigmas = outputs[0]["sigmas"]
        rollout_time = time.perf_counter() - started
        started = time.perf_counter()
        rewards = ray.get(self.reward_actor.reward.remote(batch["images"], prompts)).double()
        reward_time = time.perf_counter() - started
        train_data = algorithm.train_data(rewards, sigmas, config)
        metrics = {
            "rollout/reward/raw_mean": rewards.mean().item(),
            "rollout/reward/raw_median": rewards.median().item(),
            "rollout/reward/raw_std": rewards.std(correction=0).item(),
            "rollout/reward/raw_min": rewards.min().item(),
            "rollout/reward/raw_max": rewards.max().item(),
            "rollout/reward/raw_num_samples": int(rewards.numel()),
            "perf/rollout_time": rollout_time,
            "perf/reward_time": reward_time,
            "perf/images_per_sec": rewards.numel() / rollout_time,
            "perf/rollout_flops": rollout_flops,
            **phases,
            **algorithm.rollout_metrics(batch),
        }
        del batch["images"]
        batch.update({**train_data,
                      "prompt_ids": torch.tensor([i for i, _ in order]).repeat_interleave(group_size),
                      # sample -> its prompt's row of prompt_embeds / pooled (one row per prompt)
                      "prompt_row": torch.arange(len(order)).repeat_interleave(group_size)})
        return batch, metrics
