"""Every seed the recipe derives, from the job's two: ``--seed`` and ``--init-seed``.

``--seed`` (``job.seed``) seeds every process's RNGs under ``--deterministic-mode`` and is the
root of the data's randomness: which prompts a rollout takes, each sample's initial and SDE
noise, the trainer's forward-process noise. ``--init-seed`` (``model.init_seed``) is the root of
the random-init weights. Each derived value is a pure function of its inputs, spelled here once:
actors in other processes that must agree (the engines' and the trainer's LoRA init) call the
same function. No torch here; callers seed their own ``torch.Generator``.
"""

from __future__ import annotations

import hashlib

# Random-init weights: --init-seed plus a fixed offset per component.
_WEIGHT_OFFSETS = {"transformer": 0, "clip_l": 1, "clip_g": 2, "t5": 3, "vae": 4, "pickscore": 5, "lora": 100}
WEIGHT_COMPONENTS = tuple(_WEIGHT_OFFSETS)

_PRIME = 1_000_003
_ROLLOUT_PRIME = 100_003
_GENERATOR_RANGE = 2**63


def weights(init_seed: int, component: str) -> int:
    """The seed of a randomly initialised component (``WEIGHT_COMPONENTS``): the same in every
    process, so that each builds the same weights (the engines' LoRA and the trainer's agree)."""
    return init_seed + _WEIGHT_OFFSETS[component]


def rollout(seed: int, rollout_index: int) -> int:
    """The seed of one rollout's samples (the engines' initial and SDE noise)."""
    return seed * _ROLLOUT_PRIME + rollout_index


def prompt_rank(seed: int, rollout_index: int, prompt_index: int) -> str:
    """The key that orders the prompt file for a rollout (the first ``prompts_per_rollout`` are taken)."""
    return hashlib.sha256(f"{seed}:{rollout_index}:{prompt_index}".encode()).hexdigest()


def initial_noise(rollout_seed: int, prompt_index: int, sample_index: int) -> int:
    """The generator seed of one sample's initial noise."""
    return ((rollout_seed * _PRIME + prompt_index) * _PRIME + sample_index) % _GENERATOR_RANGE


def sde_noise(rollout_seed: int, prompt_index: int, sample_index: int) -> int:
    """The generator seed of one sample's Flow-GRPO SDE step noise: a hash keeps this stream
    apart from the sample's initial noise."""
    digest = hashlib.sha256(f"flow-grpo-sde:{rollout_seed}:{prompt_index}:{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % _GENERATOR_RANGE


def forward_noise(seed: int, rollout_index: int, offset: int, timestep: int, rank: int) -> int:
    """The generator seed of the DiffusionNFT trainer's forward-process noise for one train
    timestep of one optimizer step (``offset``: the step's first sample in the rank's share)."""
    return ((seed * _PRIME + rollout_index) * _PRIME + offset) * 1_000 + timestep * 10 + rank
