"""The rollout engine: diffusers SD3 sampling with the trainer's synced LoRA weights."""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch

from detaudit.env import compile_cache
from recipes.diffusion_nft.actors.common import DTYPES, setup_process
from recipes.diffusion_nft.algorithms import Algorithm, SampleRequest
from recipes.diffusion_nft.config import ALGORITHM_MODULES, JobConfig
from recipes.diffusion_nft.flops import image_tokens, transformer_forward_flops
from recipes.diffusion_nft.lora import add_lora, lora_parameters
from recipes.diffusion_nft.models import build_pipeline, compile_blocks, max_sequence_length
from recipes.diffusion_nft.perf import PhaseClock, StartupMarks, peak_memory
from recipes.diffusion_nft.sampling import denoise, initial_noise, sampler_sigmas


def sample_batch_sizes(config: JobConfig, rank: int) -> list[int]:
    """The batch sizes engine ``rank``'s ``generate`` runs the transformer at: its share of a
    rollout's prompts (the manager's shards) times the group size, in chunks of ``--sample-batch``."""
    rollout = config.rollout
    samples = len(range(rank, rollout.prompts_per_rollout, config.placement.rollout_engines)) * rollout.group_size
    if samples == 0:  # more engines than prompts: the manager never calls this one
        return []
    chunk = rollout.sample_batch or samples
    return sorted({min(chunk, samples - start) for start in range(0, samples, chunk)})


class RolloutEngine:
    """Samples a shard of each rollout's prompts as the job's algorithm does: for NFT the ODE
    sampler and the old policy (an EMA), for Flow-GRPO the SDE sampler with per-step
    log-probabilities and the policy just trained (on-policy)."""

    def __init__(self, config: JobConfig, rank: int) -> None:
        self.startup = StartupMarks()
        self.config = config
        self.device = setup_process(config, "rollout_engine")
        self.dtype = DTYPES[config.training.precision] if self.device.type == "cuda" else torch.float32
        self.startup.mark("setup")
        model = config.model
        self.pipe = build_pipeline(model.preset, model.init_seed, model.model_path, self.device, self.dtype,
                                   scheduler_shift=model.scheduler_shift, built=self.startup.mark)
        add_lora(self.pipe.transformer, model)
        self.pipe.transformer.to(self.dtype).eval().requires_grad_(False)
        if config.inject.engine_autocast != "none":  # --engine-autocast: the bug, a forward in another precision
            forward, autocast = self.pipe.transformer.forward, DTYPES[config.inject.engine_autocast]

            def autocast_forward(*args: Any, **kwargs: Any) -> Any:
                with torch.autocast(self.device.type, dtype=autocast):
                    return forward(*args, **kwargs)

            self.pipe.transformer.forward = autocast_forward
        # --compile-blocks: not yet. Rollout 0 samples eagerly; compile_transformer() runs
        # while the trainer trains on it (see there).
        self.compiled = False
        self.startup.mark("ready")
        self.rank = rank

    def ready(self) -> dict[str, float]:
        """This actor's start-up marks (wall clock); ``ready`` - ``setup`` is its model load."""
        return self.startup.marks

    def compile_transformer(self) -> float:
        """Compile the transformer's blocks (--compile-blocks) and build their kernels; returns
        the seconds it took.

        The driver calls this once, after rollout 0 has been sampled (eagerly) and while the
        trainer trains on it, so the compile is not part of the time to the first images. The
        kernels are built by one denoising step on zero inputs at each batch size ``generate``
        uses: no random draw, nothing kept. Which rollouts run eagerly (only rollout 0) is fixed
        by the order of calls, never by timing: every later ``load_lora`` and ``generate``
        reaches this actor after this call has returned. Under --deterministic-mode the
        kernels are a function of the graph alone (see ``compile_blocks``), so building them
        now or at the first real forward gives the same bits.
        """
        config = self.config
        if not config.compile.blocks or self.compiled:
            return 0.0
        started = time.perf_counter()
        compile_cache.load(f"rollout_engine{self.rank}", self.device)  # a verify's shipped kernels, if they fit
        compile_blocks(self.pipe.transformer, config.determinism.enabled)
        self.compiled = True
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            ["warm-up"], None, None, device=self.device, do_classifier_free_guidance=False,
            max_sequence_length=max_sequence_length(config.model.preset, config.model.model_path))
        side = config.rollout.resolution // self.pipe.vae_scale_factor
        latent = (self.pipe.transformer.config.in_channels, side, side)
        one_step = torch.tensor([1.0, 0.0])
        for batch in sample_batch_sizes(config, self.rank):
            denoise(self.pipe.transformer, embeds.repeat(batch, 1, 1), pooled.repeat(batch, 1),
                    torch.zeros(batch, *latent), one_step, self.dtype, self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated trainer
        compile_cache.save(f"rollout_engine{self.rank}", self.device)  # a record ships them with the standard
        return time.perf_counter() - started

    def peak_memory(self) -> dict[str, float]:
        return peak_memory(self.device)

    def weights_dtype(self) -> torch.dtype:
        """The dtype of this engine's LoRA parameters: what ``load_lora`` casts to."""
        return self.dtype

    def load_lora(self, state: dict[str, torch.Tensor]) -> int:
        """Take the old policy's LoRA weights from the trainer (names as in the trainer)."""
        params = dict(self.pipe.transformer.named_parameters())
        with torch.no_grad():
            for name, tensor in state.items():
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        return len(state)

    def lora_state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().float().cpu().clone() for n, p in lora_parameters(self.pipe.transformer)}

    @torch.no_grad()
    def generate(self, prompts: list[tuple[int, str]], rollout_seed: int) -> dict[str, Any]:
        """``group_size`` samples of each (index, prompt): the algorithm's rollout keys, images,
        each prompt's conditioning once, the sigmas, and perf figures."""
        config = self.config
        algorithm: Algorithm = importlib.import_module(ALGORITHM_MODULES[config.job.algorithm])  # see algorithms/
        group_size = config.rollout.group_size
        texts = [p for _, p in prompts]
        clock = PhaseClock(self.device)
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            texts, None, None, device=self.device, do_classifier_free_guidance=False,
            max_sequence_length=max_sequence_length(config.model.preset, config.model.model_path),
        )
        side = config.rollout.resolution // self.pipe.vae_scale_factor
        shape = (self.pipe.transformer.config.in_channels, side, side)
        samples = [(pidx, s) for pidx, _ in prompts for s in range(group_size)]
        if config.inject.group_seed:  # --one-seed-per-group: the bug, every sample of a group seeded alike
            samples = [(pidx, 0) for pidx, _ in samples]
        noise = torch.stack([initial_noise(shape, rollout_seed, pidx, s) for pidx, s in samples])
        sigmas = sampler_sigmas(self.pipe.scheduler, config.rollout.steps)
        # The trainer gets each prompt's embeddings once, in the engine's dtype (the trainer's
        # cast to its compute dtype gives the same bits as from float32): 1/group_size of the
        # bytes through the object store, and no float32 copy of a T5 sequence per sample.
        prompt_embeds, prompt_pooled = embeds.cpu(), pooled.cpu()
        embeds = embeds.repeat_interleave(group_size, dim=0)
        pooled = pooled.repeat_interleave(group_size, dim=0)
        clock.lap("encode")
        # Sample in chunks: attention activations of a whole rollout at 512x512 do not fit
        # beside a colocated trainer. Each sample's noise is its own, so chunking changes nothing.
        request = SampleRequest(transformer=self.pipe.transformer, vae=self.pipe.vae, embeds=embeds, pooled=pooled,
                                noise=noise, sigmas=sigmas, samples=samples, rollout_seed=rollout_seed,
                                chunk=config.rollout.sample_batch or noise.shape[0], dtype=self.dtype,
                                device=self.device)
        sampled = algorithm.sample(request, config, clock)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated trainer
        transformer = self.pipe.transformer.config
        flops = config.rollout.steps * transformer_forward_flops(
            transformer, noise.shape[0], image_tokens(transformer, shape[1]), embeds.shape[1])
        return {
            "flops": flops,
            "phase_times": clock.times,
            **sampled,
            "prompt_embeds": prompt_embeds,
            "pooled": prompt_pooled,
            "sigmas": sigmas,
            "prompts": [p for p in texts for _ in range(group_size)],
        }
