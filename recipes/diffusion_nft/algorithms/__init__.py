"""The RL algorithms the pipeline trains with, behind one protocol: ``Algorithm``.

An algorithm is a module of this package (``nft``, ``flow_grpo``) whose functions the actors
call at the points where algorithms differ:

- the rollout engine: ``sample`` (ODE or SDE sampling, and what each sample keeps: ``ROLLOUT_KEYS``);
- the rollout manager: ``train_data`` (advantages, and the per-sample train data) and ``rollout_metrics``;
- the train actor: ``start_step`` (one optimizer step's ``TrainStep``: per-timestep inputs and
  the loss of a micro-batch; the loop around it is the trainer's, shared) and
  ``update_old_policy`` (what the engines sample with next).

The job names its algorithm once (``--algorithm``); an actor method that calls one loads its
module with ``importlib.import_module(ALGORITHM_MODULES[name])`` into a local name (a lookup in
``sys.modules`` after the first). Written out so at each use, because that is the dispatch
``detaudit scan-rng`` follows: a call on a module loaded so reaches the function of that name in
every module ``ALGORITHM_MODULES`` names, so the NFT timestep shuffle (a global-RNG draw) stays
attributed to the RolloutManager that runs it, seeded. An attribute (``self.algorithm``) or an
object would hide it: the scanner then finds no process that runs the draw, an error.

``ALGORITHM_MODULES`` lives in ``config.py``, with the other choices of the command line: this
package depends on the config, never the other way round. Nothing here imports torch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from recipes.diffusion_nft.config import JobConfig

if TYPE_CHECKING:
    import torch

    from recipes.diffusion_nft.perf import PhaseClock


# A rollout batch (RolloutManager -> train actor): per-sample tensors, and these with one row per
# prompt (the text conditioning, sent once); ``prompt_row`` maps each sample to its prompt's row.
PER_PROMPT = ("prompt_embeds", "pooled")


def sample_conditioning(batch: dict[str, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's prompt embeddings and pooled embedding, on ``device``."""
    rows = batch["prompt_row"].to(device)
    return batch["prompt_embeds"].to(device)[rows], batch["pooled"].to(device)[rows]


@dataclass(frozen=True)
class SampleRequest:
    """What an engine hands ``sample``: one rollout's samples (rows), ready to denoise."""

    transformer: Any
    vae: Any
    embeds: torch.Tensor  # [N, T, D]: each sample's prompt embeddings
    pooled: torch.Tensor  # [N, D]
    noise: torch.Tensor  # [N, C, h, w]: each sample's initial noise (float32, CPU)
    sigmas: torch.Tensor  # [steps + 1]: the sampler's noise levels, trailing 0 included
    samples: list[tuple[int, int]]  # (prompt index, sample index) of each row
    rollout_seed: int
    chunk: int  # rows denoised at once
    dtype: torch.dtype
    device: torch.device


class Policy(Protocol):
    """The train actor's model, as an algorithm's train step uses it."""

    device: torch.device
    rank: int

    def predict(self, x_t: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor,
                t: torch.Tensor) -> torch.Tensor:
        """The velocity of the policy being trained (float32), with grad."""

    def old_policy(self) -> AbstractContextManager[None]:
        """Within: ``predict`` uses the old policy's weights (the EMA; for a no-grad forward)."""

    def reference(self) -> AbstractContextManager[None]:
        """Within: ``predict`` uses the frozen base model (adapters off)."""


class Loss(Protocol):
    loss: torch.Tensor  # the micro-batch's objective, a scalar


class TrainStep(Protocol):
    """One optimizer step of an algorithm over its share of a rollout. The trainer runs it:
    for each timestep ``begin_timestep``, then for each micro-batch ``loss``, backward, ``record``."""

    timesteps: int  # train timesteps per sample
    samples: int  # samples in this step
    latent_size: int  # latent height = width
    text_tokens: int  # prompt embedding length

    def begin_timestep(self, k: int) -> None: ...

    def loss(self, part: slice) -> Loss: ...

    def record(self, out: Any, part: slice, weight: float) -> None: ...

    def metrics(self) -> dict[str, float]:
        """The step's ``train/*`` metrics (the trainer adds grad norm, grad scale, lr and perf)."""


class Algorithm(Protocol):
    """What a module of this package provides (see the module docstring)."""

    ROLLOUT_KEYS: tuple[str, ...]  # per-sample tensors ``sample`` returns for training, beside "images"
    TRAIN_FORWARDS_PER_TIMESTEP: int  # model forwards per train timestep, the backward counted as one

    def sample(self, request: SampleRequest, config: JobConfig, clock: PhaseClock) -> dict[str, torch.Tensor]: ...

    def train_data(self, rewards: torch.Tensor, sigmas: torch.Tensor, config: JobConfig) -> dict[str, torch.Tensor]: ...

    def rollout_metrics(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def start_step(self, policy: Policy, batch: dict[str, torch.Tensor], config: JobConfig, rollout: int,
                   offset: int) -> TrainStep: ...

    def update_old_policy(self, old: list[torch.Tensor], params: list[torch.Tensor], step: int,
                          config: JobConfig) -> None: ...
