"""DiffusionNFT math (Zheng et al. 2025), free of Ray and diffusers so it can be tested alone.

* advantages: per-prompt mean, global std, clipped to +-5, mapped to r in [0, 1];
* conversion: each sample expands to K = int(steps * 0.99) train pairs at a per-sample
  random permutation of its sampler sigmas (drawn from the *process-global* torch RNG, as
  in the pipeline this recipe reproduces: that draw is what an unseeded actor breaks);
* the loss: implicit positive / negative policies around the old policy, with the
  adaptive x0-error weight, plus a KL term against the frozen reference;
* the old policy as an EMA of the trained weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

ADV_CLIP = 5.0
STD_EPS = 1e-4
WEIGHT_MIN = 1e-5
TIMESTEP_FRACTION = 0.99
# Model forwards per train timestep: v_theta, v_old, v_ref, and the backward (~1 forward).
TRAIN_FORWARDS_PER_TIMESTEP = 4


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
    for o, n in zip(old, new):
        o.mul_(decay).add_(n.detach().to(o.dtype), alpha=1 - decay)
