"""DiffusionNFT (Zheng et al. 2025): its math, free of Ray and diffusers so it can be tested
alone, and its hooks into the pipeline (the ``Algorithm`` protocol of this package).

* sampling: the SD3 flow-matching ODE (Euler) from the old policy, keeping the final latent;
* advantages: per-prompt mean, global std, clipped to +-5, mapped to r in [0, 1];
* conversion: each sample expands to K = int(steps * 0.99) train pairs at a per-sample
  random permutation of its sampler sigmas (drawn from the *process-global* torch RNG, as
  in the pipeline this recipe reproduces: that draw is what an unseeded actor breaks);
* the loss: implicit positive / negative policies around the old policy, with the
  adaptive x0-error weight, plus a KL term against the frozen reference;
* the old policy as an EMA of the trained weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.algorithms import sample_conditioning
from recipes.diffusion_nft.sampling import decode, denoise

if TYPE_CHECKING:
    from recipes.diffusion_nft.algorithms import Policy, SampleRequest
    from recipes.diffusion_nft.config import JobConfig
    from recipes.diffusion_nft.perf import PhaseClock

ADV_CLIP = 5.0
STD_EPS = 1e-4
WEIGHT_MIN = 1e-5
TIMESTEP_FRACTION = 0.99
# Model forwards per train timestep: v_theta, v_old, v_ref, and the backward (~1 forward).
TRAIN_FORWARDS_PER_TIMESTEP = 4
# What each sample keeps for training: its final latent.
ROLLOUT_KEYS = ("x0",)


def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(r - mean over the prompt's group) / (std over the whole batch + 1e-4), clipped to +-5.

    ``rewards`` is ordered prompt by prompt, ``group_size`` samples each.
    """
    rewards = rewards.double()
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    adv = centred.reshape(-1) / (rewards.std(correction=0) + STD_EPS)
    return adv.clamp(-ADV_CLIP, ADV_CLIP)


def advantage_to_r(adv: torch.Tensor) -> torch.Tensor:
    """Map a clipped advantage to the positive-sample weight r = clip(adv/5/2 + 0.5, 0, 1)."""
    return (adv / ADV_CLIP / 2 + 0.5).clamp(0.0, 1.0)


def num_train_timesteps(steps: int) -> int:
    return int(steps * TIMESTEP_FRACTION)


def convert(sigmas: torch.Tensor, num_samples: int, steps: int) -> torch.Tensor:
    """Per sample, K = int(steps*0.99) sigmas at a random permutation of the sampler's.

    ``sigmas`` are the sampler's ``steps`` noise levels (the trailing 0 excluded). Returns
    [num_samples, K]. Draws from the global torch RNG of the calling process, one
    ``torch.randperm`` per sample.
    """
    k = num_train_timesteps(steps)
    perms = torch.stack([torch.randperm(steps) for _ in range(num_samples)])
    return sigmas[:steps][perms[:, :k]]


@dataclass
class NFTLoss:
    loss: torch.Tensor
    policy_loss: torch.Tensor
    pos_loss: torch.Tensor  # per-sample
    neg_loss: torch.Tensor  # per-sample
    kl_loss: torch.Tensor


def nft_loss(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    v_ref: torch.Tensor | None,
    x0: torch.Tensor,
    x_t: torch.Tensor,
    t: torch.Tensor,
    r: torch.Tensor,
    beta: float,
    kl_weight: float,
) -> NFTLoss:
    """The DiffusionNFT objective for one timestep of a batch.

    v+ = beta*v_theta + (1-beta)*v_old ;  v- = (1+beta)*v_old - beta*v_theta
    x0+- = x_t - t * v+-  ;  w+- = stop-grad mean|x0+- - x0| per sample (float64, >= 1e-5)
    pos/neg = mean((x0+- - x0)^2 / w+-) per sample
    policy = mean((r*pos + (1-r)*neg) / beta * 5) ;  kl = mean((v_theta - v_ref)^2)
    """
    t_b = t.view(-1, *([1] * (x0.dim() - 1))).to(v_theta.dtype)
    v_pos = beta * v_theta + (1 - beta) * v_old
    v_neg = (1 + beta) * v_old - beta * v_theta
    x0_pos = x_t - t_b * v_pos
    x0_neg = x_t - t_b * v_neg
    dims = tuple(range(1, x0.dim()))
    with torch.no_grad():
        w_pos = (x0_pos.double() - x0.double()).abs().mean(dim=dims, keepdim=True).clamp(min=WEIGHT_MIN)
        w_neg = (x0_neg.double() - x0.double()).abs().mean(dim=dims, keepdim=True).clamp(min=WEIGHT_MIN)
    pos = ((x0_pos - x0) ** 2 / w_pos).mean(dim=dims)
    neg = ((x0_neg - x0) ** 2 / w_neg).mean(dim=dims)
    r = r.to(pos.dtype)
    policy = ((r * pos + (1 - r) * neg) / beta * ADV_CLIP).mean()
    if v_ref is not None and kl_weight > 0:
        kl = ((v_theta.float() - v_ref.float()) ** 2).mean()
    else:
        kl = torch.zeros((), dtype=torch.float32, device=v_theta.device)
    loss = policy + kl_weight * kl.to(policy.dtype)
    return NFTLoss(loss, policy, pos, neg, kl)


def forward_noise(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x_t = (1 - t) x0 + t eps (rectified flow)."""
    t_b = t.view(-1, *([1] * (x0.dim() - 1))).to(x0.dtype)
    return (1 - t_b) * x0 + t_b * noise


def ema_decay(step: int, slope: float = 0.001, max_decay: float = 0.5) -> float:
    """Decay of the old policy after ``step`` updates: min(slope*step, max_decay)."""
    return min(slope * step, max_decay)


@torch.no_grad()
def ema_update(old: Iterable[torch.Tensor], new: Iterable[torch.Tensor], decay: float) -> None:
    """old <- decay*old + (1-decay)*new, in place (works on FSDP shards: elementwise)."""
    for o, n in zip(old, new, strict=True):
        o.mul_(decay).add_(n.detach().to(o.dtype), alpha=1 - decay)


# --- the pipeline's hooks (recipes.diffusion_nft.algorithms.Algorithm) -----------------


def sample(request: SampleRequest, config: JobConfig, clock: PhaseClock) -> dict[str, torch.Tensor]:
    """ODE sampling, ``request.chunk`` rows at a time; the final latents and the decoded images."""
    r = request
    starts = range(0, r.noise.shape[0], r.chunk)
    latents = [denoise(r.transformer, r.embeds[i : i + r.chunk], r.pooled[i : i + r.chunk],
                       r.noise[i : i + r.chunk], r.sigmas, r.dtype, r.device) for i in starts]
    clock.lap("denoise")
    images = torch.cat([decode(r.vae, x).cpu() for x in latents])
    clock.lap("decode")
    return {"x0": torch.cat([x.cpu() for x in latents]), "images": images}


def train_data(rewards: torch.Tensor, sigmas: torch.Tensor, config: JobConfig) -> dict[str, torch.Tensor]:
    """Advantages, r, and each sample's train timesteps: the global-RNG draw of ``convert``."""
    adv = advantages(rewards, config.rollout.group_size)
    train_t = convert(sigmas, len(rewards), config.rollout.steps)
    return {"adv": adv, "r": advantage_to_r(adv), "train_t": train_t}


def rollout_metrics(batch: dict[str, torch.Tensor]) -> dict[str, float]:
    return {}


def update_old_policy(old: list[torch.Tensor], params: list[torch.Tensor], step: int, config: JobConfig) -> None:
    """The old policy (what the engines sample with) follows the trained weights as an EMA."""
    ema_update(old, params, ema_decay(step, config.nft.ema_slope, config.nft.ema_max))


def start_step(policy: Policy, batch: dict[str, torch.Tensor], config: JobConfig, rollout: int,
               offset: int) -> NFTStep:
    return NFTStep(policy, batch, config, rollout, offset)


class NFTStep:
    """One optimizer step of DiffusionNFT: at each of a sample's train timesteps, forward noise
    from an explicit generator, the old policy's and the reference's predictions for the whole
    batch (no grad), then the loss micro-batch by micro-batch."""

    def __init__(self, policy: Policy, batch: dict[str, torch.Tensor], config: JobConfig, rollout: int,
                 offset: int) -> None:
        dev = policy.device
        self.policy, self.config, self.rollout, self.offset = policy, config, rollout, offset
        self.x0 = batch["x0"].to(dev)
        self.embeds, self.pooled = sample_conditioning(batch, dev)
        self.r = batch["r"].to(dev)
        self.train_t = batch["train_t"].to(dev)
        self.adv = batch["adv"]
        self.timesteps = self.train_t.shape[1]
        self.samples = self.x0.shape[0]
        self.latent_size = self.x0.shape[-1]
        self.text_tokens = self.embeds.shape[1]
        self.sums = {"loss": 0.0, "policy": 0.0, "pos": 0.0, "neg": 0.0, "kl": 0.0}
        self.generator = torch.Generator(device="cpu")
        n = self.samples
        self.chunk = max(1, min(config.rollout.sample_batch or n, n))  # no-grad forwards keep no activations: larger

    def begin_timestep(self, k: int) -> None:
        self.t = self.train_t[:, k]
        # The forward-process noise comes from an explicit generator, never the global RNG.
        self.generator.manual_seed(seeds.forward_noise(self.config.job.seed, self.rollout, self.offset, k,
                                                       self.policy.rank))
        noise = torch.randn(self.x0.shape, generator=self.generator, dtype=torch.float32).to(self.policy.device)
        self.x_t = forward_noise(self.x0, noise, self.t)
        self.v_old, self.v_ref = self._frozen_predictions()

    @torch.no_grad()
    def _frozen_predictions(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """v_old (EMA weights) and v_ref (adapters off) for the whole batch, ``chunk`` at a time:
        one weight swap per timestep, and batches as large as memory allows."""
        x_t, embeds, pooled, t, policy = self.x_t, self.embeds, self.pooled, self.t, self.policy
        parts = [slice(lo, lo + self.chunk) for lo in range(0, x_t.shape[0], self.chunk)]
        with policy.old_policy():
            v_old = torch.cat([policy.predict(x_t[s], embeds[s], pooled[s], t[s]) for s in parts])
        v_ref = None
        if self.config.nft.kl_weight > 0:
            with policy.reference():
                v_ref = torch.cat([policy.predict(x_t[s], embeds[s], pooled[s], t[s]) for s in parts])
        return v_old, v_ref

    def loss(self, part: slice) -> NFTLoss:
        xs, ts, es, ps = self.x_t[part], self.t[part], self.embeds[part], self.pooled[part]
        v_theta = self.policy.predict(xs, es, ps, ts)
        settings = self.config.nft
        return nft_loss(v_theta, self.v_old[part], None if self.v_ref is None else self.v_ref[part], self.x0[part],
                        xs, ts, self.r[part], settings.beta, settings.kl_weight)

    def record(self, out: NFTLoss, part: slice, weight: float) -> None:
        self.sums["loss"] += out.loss.item() * weight
        self.sums["policy"] += out.policy_loss.item() * weight
        self.sums["pos"] += out.pos_loss.mean().item() * weight
        self.sums["neg"] += out.neg_loss.mean().item() * weight
        self.sums["kl"] += out.kl_loss.item() * weight

    def metrics(self) -> dict[str, float]:
        k, sums, adv = self.timesteps, self.sums, self.adv
        return {
            "train/loss": sums["loss"] / k,
            "train/nft_loss": sums["policy"],
            "train/nft_loss_per_pair": sums["policy"] / k,
            "train/nft_pos_loss": sums["pos"] / k,
            "train/nft_neg_loss": sums["neg"] / k,
            "train/nft_r_mean": self.r.mean().item(),
            "train/nft_t_mean": self.train_t.mean().item(),
            "train/nft_adv_mean": adv.mean().item(),
            "train/nft_num_timesteps": k,
            "train/adv_abs_mean": adv.abs().mean().item(),
            "train/kl_loss": sums["kl"] / k,
        }
