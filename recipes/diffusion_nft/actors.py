"""The Ray actors of the pipeline. Plain classes here; ``pipeline.py`` wraps them with ``ray.remote``.

RolloutEngine  diffusers SD3 sampling with the trainer's synced LoRA weights: for NFT the ODE sampler
               and the old policy (an EMA), for Flow-GRPO the SDE sampler with per-step
               log-probabilities and the policy just trained (on-policy)
RewardActor    PickScore (or JPEG compressibility)
RolloutManager drives the engines and the reward, computes advantages, converts to train pairs
TrainActor     one FSDP2 rank (a plain module at world size 1): LoRA on the SD3 transformer, the NFT or
               Flow-GRPO loss, AdamW, grad scaler

``args.algorithm`` picks the loss; the actors are shared, the math lives in ``nft.py`` and
``flow_grpo.py``.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from detaudit.env import determinism
from recipes.diffusion_nft import flow_grpo, nft
from recipes.diffusion_nft.config import JobConfig, load_prompts, rollout_prompts
from recipes.diffusion_nft.flops import image_tokens, transformer_forward_flops
from recipes.diffusion_nft.models import (build_pickscore, build_pipeline, build_transformer, compile_blocks, init_on,
                                          max_sequence_length)
from recipes.diffusion_nft.reward import PickScore, jpeg_compressibility
from recipes.diffusion_nft.sampling import decode, denoise, initial_noise, sampler_sigmas

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
# Batch keys with one row per prompt (the text conditioning); the others have one per sample.
PER_PROMPT = ("prompt_embeds", "pooled")


def sample_conditioning(batch: dict[str, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's prompt embeddings and pooled embedding, on ``device`` (rows of the per-prompt tensors)."""
    rows = batch["prompt_row"].to(device)
    return batch["prompt_embeds"].to(device)[rows], batch["pooled"].to(device)[rows]


def setup_process(args: JobConfig, role: str) -> torch.device:
    """Per-actor start-up: threads, and the seeding that --deterministic-mode promises."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.deterministic_mode:
        skip = role == "rollout_manager" and args.no_seed_rollout_manager
        determinism.enable(args.seed, seed_rngs=not skip, attention=args.attention_backend,
                           fill_uninitialized_memory=args.fill_uninitialized_memory)
    if args.device == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the actor's GPU
    return torch.device("cpu")


def add_lora(transformer: Any, args: JobConfig, seed: int) -> None:
    """The LoRA adapter (r, alpha on the attention projections), initialised from ``seed``."""
    from peft import LoraConfig

    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, init_lora_weights="gaussian",
                        target_modules=LORA_TARGETS)
    device = next(transformer.parameters()).device
    with init_on(device, seed):
        transformer.add_adapter(config)


def lora_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if "lora_" in n]


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Run the base model (the frozen reference) without touching requires_grad.

    peft's disable_adapters() also flips requires_grad of every adapter, which FSDP2 would
    see mid-step; the layers' own switch is all a forward needs.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False


def process_start_time() -> float | None:
    """Wall-clock time (``time.time()``) at which this process started, or None off Linux.

    From /proc (centisecond resolution): tells an actor's process spawn and imports apart
    from its own start-up, and shows whether Ray handed it a prestarted worker.
    """
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks since boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime_s - started_s)
    except (OSError, ValueError, IndexError):
        return None


class StartupMarks:
    """Wall-clock marks of an actor's start-up (``time.time()``, comparable across the run's
    processes on one host): perf metrics only, for the start-up timeline of rollout 0."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        started = process_start_time()
        if started is not None:
            self.marks["process"] = started
        self.mark("init")

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()


class PhaseClock:
    """Wall time of the phases of a call, the device synchronised at each lap (perf metrics only)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.times: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.times[phase] = self.times.get(phase, 0.0) + now - self._last
        self._last = now


def sample_batch_sizes(args: JobConfig, rank: int) -> list[int]:
    """The batch sizes engine ``rank``'s ``generate`` runs the transformer at: its share of a
    rollout's prompts (the manager's shards) times the group size, in chunks of ``--sample-batch``."""
    samples = len(range(rank, args.prompts_per_rollout, args.rollout_engines)) * args.group_size
    if samples == 0:  # more engines than prompts: the manager never calls this one
        return []
    chunk = args.sample_batch or samples
    return sorted({min(chunk, samples - start) for start in range(0, samples, chunk)})


class RolloutEngine:
    def __init__(self, args: JobConfig, rank: int) -> None:
        self.startup = StartupMarks()
        self.args = args
        self.device = setup_process(args, "rollout_engine")
        self.dtype = DTYPES[args.precision] if self.device.type == "cuda" else torch.float32
        self.startup.mark("setup")
        self.pipe = build_pipeline(args.preset, args.init_seed, args.model_path, self.device, self.dtype,
                                   scheduler_shift=args.scheduler_shift, built=self.startup.mark)
        add_lora(self.pipe.transformer, args, args.init_seed + 100)
        self.pipe.transformer.to(self.dtype).eval().requires_grad_(False)
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
        if not self.args.compile_blocks or self.compiled:
            return 0.0
        started = time.perf_counter()
        compile_blocks(self.pipe.transformer, self.args.deterministic_mode)
        self.compiled = True
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            ["warm-up"], None, None, device=self.device, do_classifier_free_guidance=False,
            max_sequence_length=max_sequence_length(self.args.preset, self.args.model_path))
        scale = self.pipe.vae_scale_factor
        latent = (self.pipe.transformer.config.in_channels, self.args.resolution // scale, self.args.resolution // scale)
        one_step = torch.tensor([1.0, 0.0])
        for batch in sample_batch_sizes(self.args, self.rank):
            denoise(self.pipe.transformer, embeds.repeat(batch, 1, 1), pooled.repeat(batch, 1),
                    torch.zeros(batch, *latent), one_step, self.dtype, self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated trainer
        return time.perf_counter() - started

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
    def generate(self, prompts: list[tuple[int, str]], group_size: int, seed: int) -> dict[str, Any]:
        args = self.args
        texts = [p for _, p in prompts]
        clock = PhaseClock(self.device)
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            texts, None, None, device=self.device, do_classifier_free_guidance=False,
            max_sequence_length=max_sequence_length(args.preset, args.model_path),
        )
        scale = self.pipe.vae_scale_factor
        channels = self.pipe.transformer.config.in_channels
        shape = (channels, args.resolution // scale, args.resolution // scale)
        noise = torch.stack([initial_noise(shape, seed, pidx, s) for pidx, _ in prompts for s in range(group_size)])
        sigmas = sampler_sigmas(self.pipe.scheduler, args.steps)
        # The trainer gets each prompt's embeddings once, in the engine's dtype (the trainer's
        # cast to its compute dtype gives the same bits as from float32): 1/group_size of the
        # bytes through the object store, and no float32 copy of a T5 sequence per sample.
        prompt_embeds, prompt_pooled = embeds.cpu(), pooled.cpu()
        embeds = embeds.repeat_interleave(group_size, dim=0)
        pooled = pooled.repeat_interleave(group_size, dim=0)
        clock.lap("encode")
        # Sample in chunks: attention activations of a whole rollout at 512x512 do not fit
        # beside a colocated trainer. Each sample's noise is its own, so chunking changes nothing.
        chunk = args.sample_batch or noise.shape[0]
        starts = range(0, noise.shape[0], chunk)
        trajectory = {}
        if args.algorithm == "flow-grpo":
            # Each sample's SDE noise comes from its own generator: no global draw, and chunking changes nothing.
            generators = flow_grpo.sample_generators(seed, [(pidx, s) for pidx, _ in prompts for s in range(group_size)])
            parts = [flow_grpo.sample_sde(self.pipe.transformer, self.pipe.vae, embeds[i : i + chunk],
                                          pooled[i : i + chunk], noise[i : i + chunk], sigmas,
                                          generators[i : i + chunk], args.noise_level, self.dtype, self.device)
                     for i in starts]
            trajectory = {"latents": torch.cat([p.latents for p in parts]),
                          "log_probs": torch.cat([p.log_probs for p in parts])}
            x0 = trajectory["latents"][:, -1]
            images = torch.cat([p.images for p in parts])
            clock.lap("denoise_decode")
        else:
            latents = [denoise(self.pipe.transformer, embeds[i : i + chunk], pooled[i : i + chunk],
                               noise[i : i + chunk], sigmas, self.dtype, self.device) for i in starts]
            clock.lap("denoise")
            images = torch.cat([decode(self.pipe.vae, x).cpu() for x in latents])
            clock.lap("decode")
            x0 = torch.cat([x.cpu() for x in latents])
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated trainer
        config = self.pipe.transformer.config
        flops = args.steps * transformer_forward_flops(config, noise.shape[0], image_tokens(config, shape[1]),
                                                       embeds.shape[1])
        return {
            "flops": flops,
            "phase_times": clock.times,
            "x0": x0,
            "images": images,
            "prompt_embeds": prompt_embeds,
            "pooled": prompt_pooled,
            "sigmas": sigmas,
            "prompts": [p for p in texts for _ in range(group_size)],
            **trajectory,
        }


class RewardActor:
    def __init__(self, args: JobConfig) -> None:
        self.startup = StartupMarks()
        self.args = args
        self.device = setup_process(args, "reward")
        self.startup.mark("setup")
        if args.reward == "pickscore":
            processor, model = build_pickscore(args.preset, args.init_seed, args.pickscore_path,
                                               args.pickscore_processor, self.device)
            self.score = PickScore(processor, model, self.device)
        else:
            self.score = jpeg_compressibility
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def reward(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return self.score(images, prompts)


def train_pairs(algorithm: str, rewards: torch.Tensor, sigmas: torch.Tensor, group_size: int,
                steps: int) -> dict[str, torch.Tensor]:
    """A rollout's advantages and per-sample train data. Only NFT draws (its timestep shuffle)."""
    if algorithm == "nft":
        adv = nft.advantages(rewards, group_size)
        train_t = nft.convert(sigmas, len(rewards), steps)  # the global-RNG draw: NFT only
        return {"adv": adv, "r": nft.advantage_to_r(adv), "train_t": train_t}
    adv = flow_grpo.group_advantages(rewards, group_size)
    return {"adv": adv, "sigmas": sigmas.expand(len(rewards), -1).clone()}


class RolloutManager:
    """Drives rollouts: engines -> reward -> advantages -> train pairs.

    NFT: per-sample train timesteps from ``torch.randperm`` on this process's global RNG.
    Flow-GRPO: group advantages over the recorded trajectories; no draw at all.
    """

    def __init__(self, args: JobConfig, engines: list[Any], reward_actor: Any) -> None:
        self.startup = StartupMarks()
        self.args = args
        # Under --deterministic-mode this seeds the actor's global torch RNG; with
        # --no-seed-rollout-manager it is left as torch seeded it at start-up: randomly.
        self.device = setup_process(args, "rollout_manager")
        self.startup.mark("setup")
        self.engines = engines
        self.reward_actor = reward_actor
        self.prompts = load_prompts(args.prompts)
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def generate(self, rollout: int) -> tuple[dict[str, Any], dict[str, float]]:
        import ray

        args = self.args
        started = time.perf_counter()
        chosen = rollout_prompts(self.prompts, rollout, args.prompts_per_rollout, args.seed)
        shards = [chosen[i :: len(self.engines)] for i in range(len(self.engines))]
        seed = args.seed * 100_003 + rollout
        outputs = ray.get([e.generate.remote(s, args.group_size, seed) for e, s in zip(self.engines, shards) if s])
        rollout_flops = sum(o["flops"] for o in outputs)
        phases = {f"perf/engine_{phase}_time": max(o["phase_times"].get(phase, 0.0) for o in outputs)
                  for phase in sorted({phase for o in outputs for phase in o["phase_times"]})}
        order = [p for s in shards if s for p in s]  # prompts in the order the outputs come
        keys = ("images", "prompt_embeds", "pooled") + (("latents", "log_probs") if args.algorithm == "flow-grpo"
                                                         else ("x0",))
        batch = {key: torch.cat([o[key] for o in outputs]) for key in keys}
        prompts = [p for o in outputs for p in o["prompts"]]
        sigmas = outputs[0]["sigmas"]
        rollout_time = time.perf_counter() - started
        started = time.perf_counter()
        rewards = ray.get(self.reward_actor.reward.remote(batch["images"], prompts)).double()
        reward_time = time.perf_counter() - started
        pairs = train_pairs(args.algorithm, rewards, sigmas, args.group_size, args.steps)
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
        }
        if args.algorithm == "flow-grpo":
            metrics["rollout/log_prob_mean"] = batch["log_probs"].mean().item()
        del batch["images"]
        batch.update({**pairs,
                      "prompt_ids": torch.tensor([i for i, _ in order]).repeat_interleave(args.group_size),
                      # sample -> its prompt's row of prompt_embeds / pooled (one row per prompt)
                      "prompt_row": torch.arange(len(order)).repeat_interleave(args.group_size)})
        return batch, metrics


class TrainActor:
    """One FSDP2 rank (or, at world size 1, a plain module): LoRA on the SD3 transformer,
    trained with the DiffusionNFT or the Flow-GRPO loss."""

    def __init__(self, args: JobConfig, rank: int, world_size: int, master_port: int) -> None:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        self.startup = StartupMarks()
        self.args = args
        self.rank, self.world_size = rank, world_size
        self.device = setup_process(args, "train")
        self.startup.mark("setup")
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{master_port}", rank=rank,
                                world_size=world_size)
        self.startup.mark("process_group")
        self.dtype = DTYPES[args.precision]
        model = build_transformer(args.preset, args.init_seed, self.device)
        self.startup.mark("transformer")
        if args.model_path is not None:
            from diffusers import SD3Transformer2DModel

            model = SD3Transformer2DModel.from_pretrained(args.model_path, subfolder="transformer",
                                                          local_files_only=True).to(self.device)
        model.requires_grad_(False)
        add_lora(model, args, args.init_seed + 100)
        for _, p in lora_parameters(model):
            p.requires_grad_(True)
        if args.activation_checkpointing:
            model.enable_gradient_checkpointing()
        # ``params``: the float32 LoRA weights the optimizer steps. ``compute``: the weights
        # the forward reads, in the compute dtype, or None when they are ``params`` themselves.
        self.compute: list[torch.nn.Parameter] | None = None
        if world_size > 1 or args.fsdp_single_rank:
            mp = MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32)
            # FSDP2's default mesh lives on whatever accelerator torch finds: on a GPU host with
            # --device cpu it would move the shards to cuda:0. Name the run's device.
            mesh = init_device_mesh(self.device.type, (world_size,))
            for block in model.transformer_blocks:
                fully_shard(block, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
            self.lora = lora_parameters(model)  # after sharding: FSDP2 replaces the parameters
            self.params = [p for _, p in self.lora]
        else:
            # World size 1: no FSDP, whose per-block gather and cast would run on every
            # forward. Its arithmetic is kept: parameters (not buffers) cast once to the
            # compute dtype, float32 master LoRA weights, gradients cast to float32 and summed.
            self.lora = lora_parameters(model)
            self.params = [p for _, p in self.lora]
            if self.dtype != torch.float32:
                self.params = [p.detach().float().clone().requires_grad_(True) for p in self.params]
                self.compute = [p for _, p in self.lora]
                for p in model.parameters():
                    p.data = p.data.to(self.dtype)
        # --compile-blocks wraps the blocks at the first train call (after sharding and casting):
        # importing the compiler is seconds of start-up that nothing waits on then.
        self.compiled = False
        self.model = model
        # The old policy: an EMA copy of the LoRA weights (as local shards).
        self.old = [p.detach().clone() for p in self.params]
        self.optimizer = torch.optim.AdamW(self.params, lr=args.lr, weight_decay=args.weight_decay)
        self.scaler = None
        if self.dtype == torch.float16:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            self.scaler = ShardedGradScaler(device=self.device.type, init_scale=args.grad_scaler_init,
                                            backoff_factor=args.grad_scaler_backoff)
        self.step = 0
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    @contextmanager
    def old_policy(self) -> Iterator[None]:
        """Swap the EMA weights into the LoRA parameters for a no-grad forward."""
        live = self.compute if self.compute is not None else self.params
        saved = [p.detach().clone() for p in live]
        with torch.no_grad():
            for p, o in zip(live, self.old):
                p.copy_(o)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(live, saved):
                    p.copy_(s)

    @torch.no_grad()
    def _load_compute_weights(self) -> None:
        """Round the float32 master LoRA weights into the compute copies (as FSDP's cast)."""
        if self.compute is not None:
            for c, p in zip(self.compute, self.params):
                c.copy_(p)

    def _accumulate_grads(self) -> None:
        """Move the compute copies' gradients into the master weights' (float32, summed)."""
        if self.compute is None:
            return
        for c, p in zip(self.compute, self.params):
            if c.grad is None:
                continue
            grad = c.grad.float()
            p.grad = grad if p.grad is None else p.grad.add_(grad)
            c.grad = None

    def _predict(self, x_t: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        timestep = t * 1000
        if self.compute is not None:
            # FSDP's mixed precision casts every floating input of the root module, the
            # timestep too; the plain module at world size 1 does the same arithmetic.
            timestep = timestep.to(self.dtype)
        out = self.model(hidden_states=x_t.to(self.dtype), encoder_hidden_states=embeds.to(self.dtype),
                         pooled_projections=pooled.to(self.dtype), timestep=timestep, return_dict=False)[0]
        return out.float()

    @torch.no_grad()
    def _frozen_predictions(self, x_t: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor, t: torch.Tensor,
                            chunk: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """v_old (EMA weights) and v_ref (adapters off) for the whole batch, ``chunk`` at a time:
        one weight swap per timestep, and batches as large as memory allows."""
        parts = [slice(lo, lo + chunk) for lo in range(0, x_t.shape[0], chunk)]
        with self.old_policy():
            v_old = torch.cat([self._predict(x_t[s], embeds[s], pooled[s], t[s]) for s in parts])
        v_ref = None
        if self.args.kl_weight > 0:
            with adapters_disabled(self.model):
                v_ref = torch.cat([self._predict(x_t[s], embeds[s], pooled[s], t[s]) for s in parts])
        return v_old, v_ref

    def train(self, batch: dict[str, torch.Tensor], rollout: int) -> list[dict[str, float]]:
        import torch.distributed as dist

        args = self.args
        if args.compile_blocks and not self.compiled:
            compile_blocks(self.model, args.deterministic_mode)  # compiles at the first forward
            self.compiled = True
        n = batch["adv"].shape[0]
        mine = list(range(self.rank, n, self.world_size))
        per_step = args.train_batch_size // self.world_size
        step = self._flow_grpo_step if args.algorithm == "flow-grpo" else self._optimizer_step
        results = []
        for start in range(0, len(mine), per_step):
            idx = torch.tensor(mine[start : start + per_step])
            results.append(step({k: v if k in PER_PROMPT else v[idx] for k, v in batch.items()}, rollout, start))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated rollout engine
        if self.world_size > 1:
            for metrics in results:
                keys = sorted(k for k in metrics if not k.startswith("perf/"))
                values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
                dist.all_reduce(values)
                metrics.update({k: v / self.world_size for k, v in zip(keys, values.tolist())})
        return results

    def _optimizer_step(self, batch: dict[str, torch.Tensor], rollout: int, offset: int) -> dict[str, float]:
        args = self.args
        started = time.perf_counter()
        dev = self.device
        x0 = batch["x0"].to(dev)
        embeds, pooled = sample_conditioning(batch, dev)
        r = batch["r"].to(dev)
        train_t = batch["train_t"].to(dev)
        k_steps = train_t.shape[1]
        self.optimizer.zero_grad(set_to_none=True)
        self._load_compute_weights()
        sums = {"loss": 0.0, "policy": 0.0, "pos": 0.0, "neg": 0.0, "kl": 0.0}
        gen = torch.Generator(device="cpu")
        n = x0.shape[0]
        micro = max(1, min(args.micro_batch or n, n))
        chunk = max(1, min(args.sample_batch or n, n))  # no-grad forwards keep no activations: larger
        for k in range(k_steps):
            t = train_t[:, k]
            # The forward-process noise comes from an explicit generator, never the global RNG.
            gen.manual_seed(((args.seed * 1_000_003 + rollout) * 1_000_003 + offset) * 1_000 + k * 10 + self.rank)
            noise = torch.randn(x0.shape, generator=gen, dtype=torch.float32).to(dev)
            x_t = nft.forward_noise(x0, noise, t)
            v_old, v_ref = self._frozen_predictions(x_t, embeds, pooled, t, chunk)
            # Micro-batches bound activation memory; gradients accumulate to the same sum.
            for lo in range(0, n, micro):
                part = slice(lo, lo + micro)
                weight = (min(lo + micro, n) - lo) / n
                xs, ts, es, ps = x_t[part], t[part], embeds[part], pooled[part]
                v_theta = self._predict(xs, es, ps, ts)
                out = nft.nft_loss(v_theta, v_old[part], None if v_ref is None else v_ref[part], x0[part], xs, ts,
                                   r[part], args.beta, args.kl_weight)
                loss = out.loss * weight / k_steps
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
                self._accumulate_grads()
                sums["loss"] += out.loss.item() * weight
                sums["policy"] += out.policy_loss.item() * weight
                sums["pos"] += out.pos_loss.mean().item() * weight
                sums["neg"] += out.neg_loss.mean().item() * weight
                sums["kl"] += out.kl_loss.item() * weight
        grad_norm, scale = self._update()
        nft.ema_update(self.old, self.params, nft.ema_decay(self.step, args.ema_slope, args.ema_max))
        adv = batch["adv"]
        config = self.model.config
        flops = k_steps * nft.TRAIN_FORWARDS_PER_TIMESTEP * transformer_forward_flops(
            config, x0.shape[0], image_tokens(config, x0.shape[-1]), embeds.shape[1])
        return {
            "train/loss": sums["loss"] / k_steps,
            "train/nft_loss": sums["policy"],
            "train/nft_loss_per_pair": sums["policy"] / k_steps,
            "train/nft_pos_loss": sums["pos"] / k_steps,
            "train/nft_neg_loss": sums["neg"] / k_steps,
            "train/nft_r_mean": r.mean().item(),
            "train/nft_t_mean": train_t.mean().item(),
            "train/nft_adv_mean": adv.mean().item(),
            "train/nft_num_timesteps": k_steps,
            "train/adv_abs_mean": adv.abs().mean().item(),
            "train/kl_loss": sums["kl"] / k_steps,
            "train/grad_norm": grad_norm,
            "train/grad_scale": scale,
            "train/lr": self.optimizer.param_groups[0]["lr"],
            "perf/train_step_time": time.perf_counter() - started,
            "perf/train_pairs": x0.shape[0] * k_steps,
            "perf/train_flops": flops,
        }

    def _update(self) -> tuple[float, float]:
        """Unscale, clip the grad norm to ``grad_clip``, step (the scaler skips a step whose grads overflowed).

        Returns (grad norm before clipping, grad scale; 1.0 without a scaler).
        """
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.args.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when grads overflowed (grad_norm inf/NaN)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.step += 1
        return float(grad_norm), float(scale)

    def _flow_grpo_step(self, batch: dict[str, torch.Tensor], rollout: int, offset: int) -> dict[str, float]:
        """One optimizer step of Flow-GRPO over the batch's first int(steps * timestep_fraction) transitions.

        The old log-probs are the engine's, recorded while sampling; the policy that sampled is
        this trainer's weights at the rollout's start (synced after every rollout), so the first
        step's ratios differ from 1 only by engine-vs-trainer numerics (the log-prob drift).
        """
        args = self.args
        started = time.perf_counter()
        dev = self.device
        latents = batch["latents"]  # [n, steps + 1, C, h, w], CPU: moved a timestep at a time
        old_log_probs = batch["log_probs"].to(dev)
        sigmas = batch["sigmas"].to(dev)
        adv = batch["adv"].to(dev)
        embeds, pooled = sample_conditioning(batch, dev)
        n = latents.shape[0]
        k_steps = flow_grpo.num_train_timesteps(latents.shape[1] - 1, args.timestep_fraction)
        sigma_max = float(batch["sigmas"][0, 1])
        micro = max(1, min(args.micro_batch or n, n))
        self.optimizer.zero_grad(set_to_none=True)
        self._load_compute_weights()
        keys = ("loss", "policy", "kl", "clip_frac", "approx_kl", "ratio", "drift")
        sums = dict.fromkeys(keys, 0.0)
        drift_max = 0.0
        for j in range(k_steps):
            x_j, x_next = latents[:, j].to(dev), latents[:, j + 1].to(dev)
            for lo in range(0, n, micro):
                part = slice(lo, lo + micro)
                weight = (min(lo + micro, n) - lo) / n
                xs, ts, es, ps = x_j[part], sigmas[part, j], embeds[part], pooled[part]
                v_ref = None
                if args.kl_weight > 0:
                    with torch.no_grad(), adapters_disabled(self.model):
                        v_ref = self._predict(xs, es, ps, ts)
                v_theta = self._predict(xs, es, ps, ts)
                out = flow_grpo.grpo_loss(v_theta, v_ref, xs, x_next[part], ts, sigmas[part, j + 1],
                                          old_log_probs[part, j], adv[part], noise_level=args.noise_level,
                                          sigma_max=sigma_max, clip_range=args.clip_range, kl_weight=args.kl_weight)
                loss = out.loss * weight / k_steps
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
                self._accumulate_grads()
                drift = (out.log_prob - old_log_probs[part, j]).abs()
                for key, value in (("loss", out.loss), ("policy", out.policy_loss), ("kl", out.kl),
                                   ("clip_frac", out.clip_frac), ("approx_kl", out.approx_kl),
                                   ("ratio", out.ratio.mean()), ("drift", drift.mean())):
                    sums[key] += value.item() * weight
                drift_max = max(drift_max, drift.max().item())
        grad_norm, scale = self._update()
        # The next rollout samples with the policy just trained (on-policy): no EMA here.
        with torch.no_grad():
            for old, param in zip(self.old, self.params):
                old.copy_(param.detach())
        config = self.model.config
        flops = k_steps * flow_grpo.TRAIN_FORWARDS_PER_TIMESTEP * transformer_forward_flops(
            config, n, image_tokens(config, latents.shape[-1]), embeds.shape[1])
        return {
            "train/loss": sums["loss"] / k_steps,
            "train/policy_loss": sums["policy"] / k_steps,
            "train/kl": sums["kl"] / k_steps,
            "train/clip_frac": sums["clip_frac"] / k_steps,
            "train/approx_kl": sums["approx_kl"] / k_steps,
            "train/ratio_mean": sums["ratio"] / k_steps,
            "train/logprob_drift_mean": sums["drift"] / k_steps,
            "train/logprob_drift_max": drift_max,
            "train/adv_abs_mean": adv.abs().mean().item(),
            "train/num_timesteps": k_steps,
            "train/grad_norm": grad_norm,
            "train/grad_scale": scale,
            "train/lr": self.optimizer.param_groups[0]["lr"],
            "perf/train_step_time": time.perf_counter() - started,
            "perf/train_pairs": n * k_steps,
            "perf/train_flops": flops,
        }

    def old_lora_state(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor] | None:
        """The old policy's LoRA weights, gathered whole (every rank must call; rank 0 returns).

        ``dtype``: the receiver's (an engine's) parameter dtype. Rounding here, before the copy
        to the CPU, gives the bits the engine's own cast would give, in fewer bytes.
        """
        state = {}
        for (name, _), shard in zip(self.lora, self.old):
            full = shard.full_tensor() if hasattr(shard, "full_tensor") else shard
            state[name] = full.detach().float().to(dtype).cpu()
        return state if self.rank == 0 else None

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

