"""Flow-GRPO (Liu et al. 2025, "Flow-GRPO: Training Flow Matching Models via Online RL"): its
math, free of Ray so it can be tested alone (the SDE sampler takes the diffusers modules as
arguments), and its hooks into the pipeline (the ``Algorithm`` protocol of this package). Every draw comes from an explicit per-sample ``torch.Generator``: nothing on the
Flow-GRPO path touches a process-global RNG, so its results cannot depend on which process
was seeded (the property the ``--no-seed-rollout-manager`` test proves).

* SDE sampling: the flow ODE x' = v is replaced by the reverse SDE with the same marginals,
  with noise level ``a``. From sigma to sigma_next (dt = sigma_next - sigma < 0)::

      std   = a * sqrt(sigma / (1 - sigma))        (sigma = 1 uses sigma_1 in the denominator)
      mean  = x * (1 + std^2 / (2 sigma) * dt) + v * (1 + std^2 (1 - sigma) / (2 sigma)) * dt
      x_next = mean + std * sqrt(-dt) * eps

  so each transition is Gaussian N(mean, (std sqrt(-dt))^2 I). Its log-probability is the
  Gaussian log-density of x_next, averaged over the latent's elements (as Flow-GRPO does,
  so that ratios do not scale with the image size).
* Group-relative advantages: (reward - mean of the prompt's group) / (std of the group + 1e-4).
* The PPO clipped objective on ratio = exp(log p_theta - log p_old), advantages clipped to
  +-5, over the first ``int(steps * timestep_fraction)`` sampled transitions (in order: no
  draw picks them).
* KL to the reference policy (the frozen base: adapters off): the KL between the two
  Gaussian transitions, mean over elements of (mean_theta - mean_ref)^2 / (2 (std sqrt(-dt))^2).
  (Flow-GRPO's public code leaves out the -dt factor, a per-step constant.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.algorithms import sample_conditioning
from recipes.diffusion_nft.sampling import decode

if TYPE_CHECKING:
    from recipes.diffusion_nft.algorithms import Policy, SampleRequest
    from recipes.diffusion_nft.config import JobConfig
    from recipes.diffusion_nft.perf import PhaseClock

ADV_CLIP = 5.0
STD_EPS = 1e-4
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# Model forwards per train timestep: v_theta, v_ref, and the backward (~1 forward).
TRAIN_FORWARDS_PER_TIMESTEP = 3
# What each sample keeps for training: its trajectory and the log-probability of each transition.
ROLLOUT_KEYS = ("latents", "log_probs")


def num_train_timesteps(steps: int, fraction: float) -> int:
    """How many of the ``steps`` sampled transitions are trained on: int(steps * fraction), >= 1."""
    return max(1, int(steps * fraction))


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(r - mean of the prompt's group) / (population std of the group + 1e-4), float64.

    ``rewards`` is ordered prompt by prompt, ``group_size`` samples each. A group whose
    rewards are all equal gets zero advantages.
    """
    grouped = rewards.double().view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True, correction=0)
    return ((grouped - mean) / (std + STD_EPS)).reshape(-1)


def _per_sample(value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """A scalar or [N] tensor, shaped to broadcast over ``like`` [N, ...]."""
    value = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    if value.dim() == 0:
        value = value.expand(like.shape[0])
    return value.view(-1, *([1] * (like.dim() - 1)))


def sde_std(sigma: torch.Tensor, sigma_max: float, noise_level: float) -> torch.Tensor:
    """The SDE's diffusion coefficient a * sqrt(sigma / (1 - sigma)); sigma = 1 divides by 1 - sigma_max."""
    denominator = 1 - torch.where(sigma == 1, torch.full_like(sigma, sigma_max), sigma)
    return noise_level * torch.sqrt(sigma / denominator)


@dataclass
class SDEStep:
    next_sample: torch.Tensor  # x_next [N, ...], float32
    log_prob: torch.Tensor  # [N]: mean over elements of log N(x_next; mean, scale^2)
    mean: torch.Tensor  # [N, ...]
    scale: torch.Tensor  # std * sqrt(-dt), broadcastable to [N, ...]


def sde_step(
    velocity: torch.Tensor,
    sample: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: float,
    sigma_max: float,
    next_sample: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> SDEStep:
    """One Flow-GRPO SDE transition and the log-probability of its result.

    Give ``next_sample`` to score a recorded transition (training), or ``noise`` (eps, drawn
    by the caller from its own generators) to take a new one (sampling). Computed in float32.
    """
    v = velocity.float()
    x = sample.float()
    s = _per_sample(sigma, x)
    s_next = _per_sample(sigma_next, x)
    dt = s_next - s
    std = sde_std(s, sigma_max, noise_level)
    mean = x * (1 + std**2 / (2 * s) * dt) + v * (1 + std**2 * (1 - s) / (2 * s)) * dt
    scale = std * torch.sqrt(-dt)
    if next_sample is None:
        if noise is None:
            raise ValueError("sde_step needs next_sample (to score) or noise (to sample)")
        next_sample = mean + scale * noise.to(mean.device, torch.float32)
    next_sample = next_sample.float().detach()
    return SDEStep(next_sample, gaussian_log_prob(next_sample, mean, scale), mean, scale)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Per sample: mean over elements of -(x - mean)^2 / (2 scale^2) - log(scale) - log(sqrt(2 pi))."""
    scale = scale.expand_as(mean)
    elementwise = -((x - mean) ** 2) / (2 * scale**2) - torch.log(scale) - LOG_SQRT_2PI
    return elementwise.mean(dim=tuple(range(1, x.dim())))


def kl_to_reference(mean: torch.Tensor, mean_ref: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, scale^2) || N(mean_ref, scale^2)) per element, averaged over the batch: a scalar."""
    scale = scale.expand_as(mean)
    return ((mean - mean_ref) ** 2 / (2 * scale**2)).mean()


@dataclass
class GRPOLoss:
    loss: torch.Tensor  # policy + kl_weight * kl
    policy_loss: torch.Tensor
    kl: torch.Tensor
    ratio: torch.Tensor  # [N], detached
    log_prob: torch.Tensor  # [N], detached
    clip_frac: torch.Tensor  # fraction of |ratio - 1| > clip_range
    approx_kl: torch.Tensor  # 0.5 * mean((log p - log p_old)^2)


def clipped_objective(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO: mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))), A clipped to +-5; returns (loss, ratio)."""
    adv = advantages.to(log_prob.dtype).clamp(-ADV_CLIP, ADV_CLIP)
    ratio = torch.exp(log_prob - old_log_prob.to(log_prob.dtype))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    return torch.maximum(unclipped, clipped).mean(), ratio


def grpo_loss(
    velocity: torch.Tensor,
    velocity_ref: torch.Tensor | None,
    sample: torch.Tensor,
    next_sample: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    *,
    noise_level: float,
    sigma_max: float,
    clip_range: float,
    kl_weight: float,
) -> GRPOLoss:
    """The Flow-GRPO objective for one sampled transition of a batch (float32)."""
    step = sde_step(velocity, sample, sigma, sigma_next, noise_level, sigma_max, next_sample=next_sample)
    policy, ratio = clipped_objective(step.log_prob, old_log_prob, advantages, clip_range)
    if velocity_ref is not None and kl_weight > 0:
        with torch.no_grad():
            ref = sde_step(velocity_ref, sample, sigma, sigma_next, noise_level, sigma_max, next_sample=next_sample)
        kl = kl_to_reference(step.mean, ref.mean, step.scale)
    else:
        kl = torch.zeros((), dtype=policy.dtype, device=policy.device)
    with torch.no_grad():
        delta = step.log_prob - old_log_prob.to(step.log_prob.dtype)
        clip_frac = ((ratio - 1.0).abs() > clip_range).float().mean()
        approx_kl = 0.5 * (delta**2).mean()
    return GRPOLoss(policy + kl_weight * kl, policy, kl, ratio.detach(), step.log_prob.detach(), clip_frac, approx_kl)


def sample_generators(seed: int, pairs: list[tuple[int, int]]) -> list[torch.Generator]:
    """One CPU generator per sample for its SDE noise, from (rollout seed, prompt index, sample index)."""
    generators = []
    for prompt_index, sample_index in pairs:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seeds.sde_noise(seed, prompt_index, sample_index))
        generators.append(gen)
    return generators


@dataclass
class SDESamples:
    latents: torch.Tensor  # [N, steps + 1, C, h, w]: the trajectory, float32, CPU
    log_probs: torch.Tensor  # [N, steps]: log-probability of each sampled transition
    images: torch.Tensor  # decoded final latents [N, 3, H, W], uint8, CPU


@torch.no_grad()
def sample_sde(transformer: Any, vae: Any, prompt_embeds: torch.Tensor, pooled: torch.Tensor,
               noise: torch.Tensor, sigmas: torch.Tensor, generators: list[torch.Generator], noise_level: float,
               dtype: torch.dtype, device: torch.device) -> SDESamples:
    """Sample with the Flow-GRPO SDE from sigma_0 to 0, keeping the trajectory and per-step log-probs.

    Sample i's step noise comes from ``generators[i]`` alone, so batching and chunking
    change nothing.
    """
    x = noise.to(device, torch.float32)
    emb = prompt_embeds.to(device, dtype)
    pool = pooled.to(device, dtype)
    sig = sigmas.to(device)
    sigma_max = float(sigmas[1])
    latents, log_probs = [x.cpu()], []
    for i in range(len(sigmas) - 1):
        t = sig[i].expand(x.shape[0])
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            v = transformer(hidden_states=x.to(dtype), encoder_hidden_states=emb, pooled_projections=pool,
                            timestep=t * 1000, return_dict=False)[0]
        eps = torch.stack([torch.randn(x.shape[1:], generator=g, dtype=torch.float32) for g in generators])
        step = sde_step(v, x, sig[i], sig[i + 1], noise_level, sigma_max, noise=eps)
        x = step.next_sample
        latents.append(x.cpu())
        log_probs.append(step.log_prob.cpu())
    return SDESamples(torch.stack(latents, dim=1), torch.stack(log_probs, dim=1), decode(vae, x).cpu())


# --- the pipeline's hooks (recipes.diffusion_nft.algorithms.Algorithm) -----------------


def sample(request: SampleRequest, config: JobConfig, clock: PhaseClock) -> dict[str, torch.Tensor]:
    """SDE sampling, ``request.chunk`` rows at a time: trajectories, log-probs, decoded images."""
    r = request
    # Each sample's SDE noise comes from its own generator: no global draw, and chunking changes nothing.
    generators = sample_generators(r.rollout_seed, r.samples)
    noise_level = config.flow_grpo.noise_level
    parts = [sample_sde(r.transformer, r.vae, r.embeds[i : i + r.chunk], r.pooled[i : i + r.chunk],
                        r.noise[i : i + r.chunk], r.sigmas, generators[i : i + r.chunk], noise_level, r.dtype, r.device)
             for i in range(0, r.noise.shape[0], r.chunk)]
    out = {"latents": torch.cat([p.latents for p in parts]), "log_probs": torch.cat([p.log_probs for p in parts]),
           "images": torch.cat([p.images for p in parts])}
    clock.lap("denoise_decode")
    return out


def train_data(rewards: torch.Tensor, sigmas: torch.Tensor, config: JobConfig) -> dict[str, torch.Tensor]:
    """Group advantages and each sample's sigmas; no draw."""
    adv = group_advantages(rewards, config.rollout.group_size)
    return {"adv": adv, "sigmas": sigmas.expand(len(rewards), -1).clone()}


def rollout_metrics(batch: dict[str, torch.Tensor]) -> dict[str, float]:
    return {"rollout/log_prob_mean": batch["log_probs"].mean().item()}


@torch.no_grad()
def update_old_policy(old: list[torch.Tensor], params: list[torch.Tensor], step: int, config: JobConfig) -> None:
    """The next rollout samples with the policy just trained (on-policy): no EMA."""
    for o, param in zip(old, params, strict=True):
        o.copy_(param.detach())


def start_step(policy: Policy, batch: dict[str, torch.Tensor], config: JobConfig, rollout: int,
               offset: int) -> GRPOStep:
    return GRPOStep(policy, batch, config)


class GRPOStep:
    """One optimizer step of Flow-GRPO over the batch's first int(steps * timestep_fraction) transitions.

    The old log-probs are the engine's, recorded while sampling; the policy that sampled is
    the trainer's weights at the rollout's start (synced after every rollout), so the first
    step's ratios differ from 1 only by engine-vs-trainer numerics (the log-prob drift).
    """

    def __init__(self, policy: Policy, batch: dict[str, torch.Tensor], config: JobConfig) -> None:
        dev = policy.device
        self.policy, self.settings = policy, config.flow_grpo
        self.latents = batch["latents"]  # [n, steps + 1, C, h, w], CPU: moved a timestep at a time
        self.old_log_probs = batch["log_probs"].to(dev)
        self.sigmas = batch["sigmas"].to(dev)
        self.adv = batch["adv"].to(dev)
        self.embeds, self.pooled = sample_conditioning(batch, dev)
        self.samples = self.latents.shape[0]
        self.timesteps = num_train_timesteps(self.latents.shape[1] - 1, self.settings.timestep_fraction)
        self.latent_size = self.latents.shape[-1]
        self.text_tokens = self.embeds.shape[1]
        self.sigma_max = float(batch["sigmas"][0, 1])
        self.sums = dict.fromkeys(("loss", "policy", "kl", "clip_frac", "approx_kl", "ratio", "drift"), 0.0)
        self.drift_max = 0.0

    def begin_timestep(self, j: int) -> None:
        self.j = j
        self.x_j, self.x_next = self.latents[:, j].to(self.policy.device), self.latents[:, j + 1].to(self.policy.device)

    def loss(self, part: slice) -> GRPOLoss:
        j, policy, settings = self.j, self.policy, self.settings
        xs, ts, es, ps = self.x_j[part], self.sigmas[part, j], self.embeds[part], self.pooled[part]
        v_ref = None
        if settings.kl_weight > 0:
            with torch.no_grad(), policy.reference():
                v_ref = policy.predict(xs, es, ps, ts)
        v_theta = policy.predict(xs, es, ps, ts)
        return grpo_loss(v_theta, v_ref, xs, self.x_next[part], ts, self.sigmas[part, j + 1],
                         self.old_log_probs[part, j], self.adv[part], noise_level=settings.noise_level,
                         sigma_max=self.sigma_max, clip_range=settings.clip_range, kl_weight=settings.kl_weight)

    def record(self, out: GRPOLoss, part: slice, weight: float) -> None:
        drift = (out.log_prob - self.old_log_probs[part, self.j]).abs()
        for key, value in (("loss", out.loss), ("policy", out.policy_loss), ("kl", out.kl),
                           ("clip_frac", out.clip_frac), ("approx_kl", out.approx_kl),
                           ("ratio", out.ratio.mean()), ("drift", drift.mean())):
            self.sums[key] += value.item() * weight
        self.drift_max = max(self.drift_max, drift.max().item())

    def metrics(self) -> dict[str, float]:
        k, sums = self.timesteps, self.sums
        return {
            "train/loss": sums["loss"] / k,
            "train/policy_loss": sums["policy"] / k,
            "train/kl": sums["kl"] / k,
            "train/clip_frac": sums["clip_frac"] / k,
            "train/approx_kl": sums["approx_kl"] / k,
            "train/ratio_mean": sums["ratio"] / k,
            "train/logprob_drift_mean": sums["drift"] / k,
            "train/logprob_drift_max": self.drift_max,
            "train/adv_abs_mean": self.adv.abs().mean().item(),
            "train/num_timesteps": k,
        }
