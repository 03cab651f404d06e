"""The train actor: one FSDP2 rank (a plain module at world size 1), and the optimizer-step loop
that every algorithm's loss runs in."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from detaudit.env import compile_cache
from recipes.diffusion_nft.actors.common import DTYPES, setup_process
from recipes.diffusion_nft.algorithms import PER_PROMPT, Algorithm, TrainStep
from recipes.diffusion_nft.config import ALGORITHM_MODULES, JobConfig
from recipes.diffusion_nft.flops import image_tokens, transformer_forward_flops
from recipes.diffusion_nft.lora import adapters_disabled, add_lora, lora_parameters
from recipes.diffusion_nft.models import build_transformer, compile_blocks
from recipes.diffusion_nft.perf import StartupMarks, peak_memory


class TrainActor:
    """LoRA on the SD3 transformer, trained with the job's algorithm; AdamW, fp16 grad scaler.

    It is the algorithm's ``Policy``: ``predict`` with the trained weights, within
    ``old_policy()`` with the old policy's, within ``reference()`` with the frozen base.
    """

    def __init__(self, config: JobConfig, rank: int, world_size: int, rendezvous: str) -> None:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        self.startup = StartupMarks()
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.device = setup_process(config, "train")
        self.startup.mark("setup")
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        dist.init_process_group(backend, init_method=rendezvous, rank=rank,
                                world_size=world_size)
        self.startup.mark("process_group")
        training = config.training
        self.dtype = DTYPES[training.precision]
        model = build_transformer(config.model.preset, config.model.init_seed, self.device)
        self.startup.mark("transformer")
        if config.model.model_path is not None:
            from diffusers import SD3Transformer2DModel

            model = SD3Transformer2DModel.from_pretrained(config.model.model_path, subfolder="transformer",
                                                          local_files_only=True).to(self.device)
        model.requires_grad_(False)
        add_lora(model, config.model)
        for _, p in lora_parameters(model):
            p.requires_grad_(True)
        if training.activation_checkpointing:
            model.enable_gradient_checkpointing()
        # ``params``: the float32 LoRA weights the optimizer steps. ``compute``: the weights
        # the forward reads, in the compute dtype, or None when they are ``params`` themselves.
        self.compute: list[torch.nn.Parameter] | None = None
        if world_size > 1 or training.fsdp_single_rank:
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
        # The old policy, as local shards: what the engines sample with (``Algorithm.update_old_policy``).
        self.old = [p.detach().clone() for p in self.params]
        # fused=None is torch's own choice (foreach on CPU); True asks for the fused kernel
        self.optimizer = torch.optim.AdamW(self.params, lr=training.lr, weight_decay=training.weight_decay,
                                           fused=True if training.fused_optimizer else None)
        if training.fused_optimizer:
            # The grad scaler then hands the fused step its found-inf flag, and torch 2.13's CPU
            # fused Adam fails rolling back its step counts with it (shape [1] into []); without
            # the flag the scaler skips an overflowed step itself, as for the foreach optimizer.
            self.optimizer._step_supports_amp_scaling = False
        self.scaler = None
        if self.dtype == torch.float16:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            self.scaler = ShardedGradScaler(device=self.device.type, init_scale=training.grad_scaler_init,
                                            backoff_factor=training.grad_scaler_backoff)
        self.step = 0
        self.startup.mark("ready")

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def peak_memory(self) -> dict[str, float]:
        return peak_memory(self.device)

    # -- the Policy an algorithm's train step uses ------------------------------------------

    def predict(self, x_t: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        timestep = t * 1000
        if self.compute is not None:
            # FSDP's mixed precision casts every floating input of the root module, the
            # timestep too; the plain module at world size 1 does the same arithmetic.
            timestep = timestep.to(self.dtype)
        out = self.model(hidden_states=x_t.to(self.dtype), encoder_hidden_states=embeds.to(self.dtype),
                         pooled_projections=pooled.to(self.dtype), timestep=timestep, return_dict=False)[0]
        return out.float()

    @contextmanager
    def old_policy(self) -> Iterator[None]:
        """Swap the old policy's weights into the LoRA parameters for a no-grad forward."""
        live = self.compute if self.compute is not None else self.params
        saved = [p.detach().clone() for p in live]
        with torch.no_grad():
            for p, o in zip(live, self.old, strict=True):
                p.copy_(o)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(live, saved, strict=True):
                    p.copy_(s)

    def reference(self) -> AbstractContextManager[None]:
        """The frozen base model: the adapters off."""
        return adapters_disabled(self.model)

    # -- training ---------------------------------------------------------------------------

    def train(self, batch: dict[str, torch.Tensor], rollout: int) -> list[dict[str, float]]:
        """This rank's share of a rollout, ``--train-batch-size`` samples per optimizer step."""
        import torch.distributed as dist

        config = self.config
        algorithm: Algorithm = importlib.import_module(ALGORITHM_MODULES[config.job.algorithm])  # see algorithms/
        if config.compile.blocks and not self.compiled:
            compile_cache.load(f"train{self.rank}", self.device)  # a verify's shipped kernels, if they fit
            compile_blocks(self.model, config.determinism.enabled)  # compiles at the first forward
            self.compiled = True
        n = batch["adv"].shape[0]
        mine = list(range(self.rank, n, self.world_size))
        per_step = config.training.train_batch_size // self.world_size
        results = []
        for start in range(0, len(mine), per_step):
            idx = torch.tensor(mine[start : start + per_step])
            share = {k: v if k in PER_PROMPT else v[idx] for k, v in batch.items()}
            results.append(self._optimizer_step(algorithm, algorithm.start_step(self, share, config, rollout, start)))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back to the colocated rollout engine
        if self.compiled:
            compile_cache.save(f"train{self.rank}", self.device)  # written only when this call compiled more
        if self.world_size > 1:
            for metrics in results:
                keys = sorted(k for k in metrics if not k.startswith("perf/"))
                values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
                dist.all_reduce(values)
                metrics.update({k: v / self.world_size for k, v in zip(keys, values.tolist(), strict=True)})
        return results

    def _optimizer_step(self, algorithm: Algorithm, step: TrainStep) -> dict[str, float]:
        """One optimizer step: at each of the step's timesteps, its micro-batches' losses
        backward (gradients accumulate to the mean over samples and timesteps); then the update,
        and the old policy follows."""
        started = time.perf_counter()
        n, k_steps = step.samples, step.timesteps
        micro = max(1, min(self.config.training.micro_batch or n, n))
        self.optimizer.zero_grad(set_to_none=True)
        self._load_compute_weights()
        for k in range(k_steps):
            step.begin_timestep(k)
            # Micro-batches bound activation memory; gradients accumulate to the same sum.
            for lo in range(0, n, micro):
                part = slice(lo, lo + micro)
                weight = (min(lo + micro, n) - lo) / n
                out = step.loss(part)
                loss = out.loss * weight / k_steps
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
                self._accumulate_grads()
                step.record(out, part, weight)
        grad_norm, scale = self._update()
        algorithm.update_old_policy(self.old, self.params, self.step, self.config)
        config = self.model.config
        flops = k_steps * algorithm.TRAIN_FORWARDS_PER_TIMESTEP * transformer_forward_flops(
            config, n, image_tokens(config, step.latent_size), step.text_tokens)
        return {
            **step.metrics(),
            "train/grad_norm": grad_norm,
            "train/grad_scale": scale,
            "train/lr": self.optimizer.param_groups[0]["lr"],
            "perf/train_step_time": time.perf_counter() - started,
            "perf/train_pairs": n * k_steps,
            "perf/train_flops": flops,
        }

    @torch.no_grad()
    def _load_compute_weights(self) -> None:
        """Round the float32 master LoRA weights into the compute copies (as FSDP's cast)."""
        if self.compute is not None:
            for c, p in zip(self.compute, self.params, strict=True):
                c.copy_(p)

    def _accumulate_grads(self) -> None:
        """Move the compute copies' gradients into the master weights' (float32, summed)."""
        if self.compute is None:
            return
        for c, p in zip(self.compute, self.params, strict=True):
            if c.grad is None:
                continue
            grad = c.grad.float()
            p.grad = grad if p.grad is None else p.grad.add_(grad)
            c.grad = None

    def _update(self) -> tuple[float, float]:
        """Unscale, clip the grad norm to ``grad_clip``, step (the scaler skips a step whose grads overflowed).

        Returns (grad norm before clipping, grad scale; 1.0 without a scaler).
        """
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.training.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when grads overflowed (grad_norm inf/NaN)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.step += 1
        return float(grad_norm), float(scale)

    def old_lora_state(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor] | None:
        """The old policy's LoRA weights, gathered whole (every rank must call; rank 0 returns).

        ``dtype``: the receiver's (an engine's) parameter dtype. Rounding here, before the copy
        to the CPU, gives the bits the engine's own cast would give, in fewer bytes.
        """
        state = {}
        for (name, _), shard in zip(self.lora, self.old, strict=True):
            full = shard.full_tensor() if hasattr(shard, "full_tensor") else shard
            state[name] = full.detach().float().to(dtype).cpu()
        return state if self.rank == 0 else None

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
