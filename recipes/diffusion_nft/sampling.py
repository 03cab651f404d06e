"""The SD3 flow-matching ODE sampler (Euler, no CFG), keeping what DiffusionNFT trains on; the VAE decode."""

from __future__ import annotations

import torch

from recipes.diffusion_nft import seeds


def sampler_sigmas(scheduler, steps: int) -> torch.Tensor:
    """The sampler's noise levels, shift applied, with the trailing 0: [steps + 1], float32."""
    scheduler.set_timesteps(steps)
    return scheduler.sigmas.detach().to("cpu", torch.float32).clone()


def initial_noise(shape: tuple[int, ...], seed: int, prompt_index: int, sample_index: int) -> torch.Tensor:
    """A sample's initial noise, from an explicit generator: (rollout seed, prompt, sample)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seeds.initial_noise(seed, prompt_index, sample_index))
    return torch.randn(shape, generator=gen, dtype=torch.float32)


@torch.no_grad()
def denoise(transformer, prompt_embeds: torch.Tensor, pooled: torch.Tensor, noise: torch.Tensor,
            sigmas: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The final latents (float32, on ``device``): Euler steps of dx/dsigma = v from sigma_0 to 0."""
    x = noise.to(device, torch.float32)
    emb = prompt_embeds.to(device, dtype)
    pool = pooled.to(device, dtype)
    sig = sigmas.to(device)
    for i in range(len(sigmas) - 1):
        t = sig[i].expand(x.shape[0])
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            v = transformer(hidden_states=x.to(dtype), encoder_hidden_states=emb, pooled_projections=pool,
                            timestep=t * 1000, return_dict=False)[0]
        x = x + (sig[i + 1] - sig[i]) * v.float()
    return x


@torch.no_grad()
def decode(vae, x: torch.Tensor) -> torch.Tensor:
    """Final latents -> uint8 images [N, 3, H, W] (on the latents' device)."""
    latents = x / vae.config.scaling_factor + vae.config.shift_factor
    images = vae.decode(latents.to(vae.dtype), return_dict=False)[0]
    return ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
