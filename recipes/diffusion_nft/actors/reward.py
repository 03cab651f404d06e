"""The reward actor: PickScore, or JPEG compressibility (weights-free)."""

from __future__ import annotations

import torch

from recipes.diffusion_nft.actors.common import setup_process
from recipes.diffusion_nft.config import JobConfig
from recipes.diffusion_nft.models import build_pickscore
from recipes.diffusion_nft.perf import StartupMarks, peak_memory
from recipes.diffusion_nft.reward import PickScore, jpeg_compressibility


class RewardActor:
    def __init__(self, config: JobConfig) -> None:
        self.startup = StartupMarks()
        self.device = setup_process(config, "reward")
        self.startup.mark("setup")
        reward, model = config.reward, config.model
        if reward.kind == "pickscore":
            processor, clip = build_pickscore(model.preset, model.init_seed, reward.pickscore_path,
                                              reward.pickscore_processor, self.device)
            self.score = PickScore(processor, clip, self.device, preprocess=reward.preprocess)
        else:
            self.score = jpeg_compressibility
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def peak_memory(self) -> dict[str, float]:
        return peak_memory(self.device)

    def reward(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return self.score(images, prompts)
