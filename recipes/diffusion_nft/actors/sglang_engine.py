"""The rollout engine on sglang (``--engine sglang``): sglang's diffusion server samples, this actor
builds its requests, pushes the trainer's LoRA into it and hands the manager what
``RolloutEngine.generate`` hands it.

The actor saves the job's model (the preset's random-init pipeline, or ``--model-path``'s) to a
local folder and starts ``recipes.diffusion_nft.sglang_server`` on it, in its own interpreter:
the sglang environment (``recipes/sglang/env.sh``). Nothing is downloaded: sglang gets a local
path and is told the model family (``--model-id``), since it recognises SD3 by name.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.actors.common import DTYPES, setup_process
from recipes.diffusion_nft.algorithms import Algorithm
from recipes.diffusion_nft.config import ALGORITHM_MODULES, JobConfig
from recipes.diffusion_nft.flops import image_tokens, transformer_forward_flops
from recipes.diffusion_nft.lora import add_lora, lora_parameters
from recipes.diffusion_nft.models import build_pipeline
from recipes.diffusion_nft.perf import PhaseClock, StartupMarks
from recipes.diffusion_nft.sglang_client import SampleSpec, SGLangClient

# sglang's SD3 config sizes latents as pixels / 8 (its VAE arch config's fixed
# spatial_compression_ratio), whatever the saved VAE compresses: a request asks for the pixels
# that give the recipe's latent size (the tiny VAE compresses 2x, SD3.5's 8x).
SGLANG_SD3_COMPRESSION = 8
SGLANG_MODEL_ID = "stable-diffusion-3.5-medium"  # sglang's short name of its SD3 pipeline config
PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
SERVER_START_TIMEOUT_S = 600.0


def server_command(model_dir: Path, port: int, dtype: torch.dtype) -> list[str]:
    """sglang's diffusion server on ``model_dir`` in this interpreter (the sglang environment)."""
    precision = PRECISIONS[dtype]
    return [sys.executable, "-m", "recipes.diffusion_nft.sglang_server",
            "--model-path", str(model_dir), "--model-id", SGLANG_MODEL_ID, "--backend", "sglang",
            "--host", "127.0.0.1", "--port", str(port),
            "--num-gpus", "1", "--dit-precision", precision, "--vae-precision", precision,
            "--text-encoder-precisions", precision, precision, precision, "--warmup-mode", "off"]


def sample_specs(config: JobConfig, vae_scale_factor: int, prompts: list[tuple[int, str]],
                 rollout_seed: int) -> list[SampleSpec]:
    """The request of each sample of ``prompts`` (``group_size`` per (index, prompt)), in the order
    sampled: each with its own seed, the one the built-in engine draws its initial noise from."""
    rollout = config.rollout
    pixels = rollout.resolution * SGLANG_SD3_COMPRESSION // vae_scale_factor
    sde = config.job.algorithm == "flow-grpo"
    return [SampleSpec(prompt, seeds.initial_noise(rollout_seed, pidx, s), rollout.steps, pixels, sde,
                       config.flow_grpo.noise_level)
            for pidx, prompt in prompts for s in range(rollout.group_size)]


def _die_with_parent() -> None:
    """In the server's process before exec: end it when the actor's process ends (Ray kills
    actors without a word; a server left behind would hold its port and its memory)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SGLangRolloutEngine:
    """Samples a shard of each rollout's prompts through an sglang diffusion server: NFT with
    its ODE sampler, Flow-GRPO with its SDE sampler and per-step log-probs. Each sample is one
    request with its own seed (``seeds.initial_noise``), from which sglang draws the sample's
    initial noise (and SDE noise) on a CPU generator."""

    def __init__(self, config: JobConfig, rank: int, launcher: Sequence[str] | None = None) -> None:
        self.startup = StartupMarks()
        self.config = config
        self.rank = rank
        self.device = setup_process(config, "rollout_engine")
        self.dtype = DTYPES[config.training.precision] if self.device.type == "cuda" else torch.float32
        self.startup.mark("setup")
        model = config.model
        pipe = build_pipeline(model.preset, model.init_seed, model.model_path, "cpu", self.dtype,
                              scheduler_shift=model.scheduler_shift, built=self.startup.mark)
        self.vae_scale_factor = int(pipe.vae_scale_factor)
        self.transformer_config = pipe.transformer.config
        self.workdir = Path(tempfile.mkdtemp(prefix=f"sglang-engine{rank}-", dir=os.environ.get("DETAUDIT_WORKDIR")))
        self.model_dir = self.workdir / "model"
        pipe.save_pretrained(self.model_dir)  # the base model: sglang adds the LoRA layers at the first push
        add_lora(pipe.transformer, model)  # only for the names and shapes load_lora accepts
        self.lora_shapes = {n: tuple(p.shape) for n, p in lora_parameters(pipe.transformer)}
        del pipe
        self.startup.mark("saved")
        from recipes.diffusion_nft.placement import free_port

        port = free_port()
        argv = list(launcher) + ["--model-path", str(self.model_dir), "--port", str(port)] if launcher else \
            server_command(self.model_dir, port, self.dtype)
        env = dict(os.environ)
        if config.determinism.enabled:
            env["SGLANG_ENABLE_DETERMINISTIC_INFERENCE"] = "1"
        self.log_path = self.workdir / "server.log"
        with open(self.log_path, "wb") as log:
            self.server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           preexec_fn=_die_with_parent)
        self.client = SGLangClient(f"http://127.0.0.1:{port}")
        try:
            self.client.wait_healthy(lambda: self.server.poll() is None, SERVER_START_TIMEOUT_S)
        except Exception as exc:
            raise RuntimeError(f"{exc}; its log: {self.log_path}\n{self.server_log_tail()}") from None
        self.startup.mark("ready")

    def server_log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def ready(self) -> dict[str, float]:
        return self.startup.marks

    def compile_transformer(self) -> float:
        return 0.0  # --compile-blocks is refused with --engine sglang (config.problems)

    def weights_dtype(self) -> torch.dtype:
        return self.dtype

    def load_lora(self, state: dict[str, torch.Tensor]) -> int:
        """Set the server's LoRA to the trainer's old-policy weights (names as in the trainer)."""
        shapes = {n: tuple(t.shape) for n, t in state.items()}
        if shapes != self.lora_shapes:
            unknown = sorted(set(shapes) ^ set(self.lora_shapes))[:3] or \
                [n for n in shapes if shapes[n] != self.lora_shapes.get(n)][:3]
            raise ValueError(f"LoRA state does not match the engine's adapter (e.g. {unknown})")
        model = self.config.model
        self.client.push_lora(state, model.lora_alpha, model.lora_rank)
        return len(state)

    def generate(self, prompts: list[tuple[int, str]], rollout_seed: int) -> dict[str, Any]:
        """``group_size`` samples of each (index, prompt), as ``RolloutEngine.generate`` returns them."""
        config = self.config
        algorithm: Algorithm = importlib.import_module(ALGORITHM_MODULES[config.job.algorithm])  # see algorithms/
        clock = PhaseClock(self.device)
        out = [self.client.generate(spec) for spec in sample_specs(config, self.vae_scale_factor, prompts, rollout_seed)]
        clock.lap("denoise_decode")
        latents = torch.stack([o["dit_trajectory"]["latents"].float() for o in out])  # [N, steps + 1, C, h, w]
        side = config.rollout.resolution // self.vae_scale_factor
        if latents.shape[1] != config.rollout.steps + 1 or latents.shape[-1] != side:
            raise RuntimeError(f"sglang returned latents of shape {tuple(latents.shape[1:])}, expected "
                               f"({config.rollout.steps + 1}, C, {side}, {side})")
        images = torch.stack([to_uint8(o["generated_output"]) for o in out])
        sampled = {"images": images, "x0": latents[:, -1], "latents": latents,
                   "log_probs": torch.stack([o["rollout_log_probs"].float() for o in out])}
        # Each prompt's conditioning once (the trainer's), from its first sample's request.
        group = config.rollout.group_size
        conditioning = [out[i]["denoising_env"]["pos_cond_kwargs"] for i in range(0, len(out), group)]
        prompt_embeds = torch.stack([c["encoder_hidden_states"] for c in conditioning]).to(self.dtype)
        pooled = torch.stack([c["pooled_projections"] for c in conditioning]).to(self.dtype)
        sigmas = out[0]["dit_trajectory"]["sigmas"].float()
        flops = config.rollout.steps * transformer_forward_flops(
            self.transformer_config, len(out), image_tokens(self.transformer_config, side), prompt_embeds.shape[1])
        return {
            "flops": flops,
            "phase_times": clock.times,
            **{key: sampled[key] for key in ("images", *algorithm.ROLLOUT_KEYS)},
            "prompt_embeds": prompt_embeds,
            "pooled": pooled,
            "sigmas": sigmas,
            "prompts": [p for _, p in prompts for _ in range(group)],
        }

    def shutdown(self) -> None:
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None and server.poll() is None:
            server.terminate()


def to_uint8(image: torch.Tensor) -> torch.Tensor:
    """sglang's decoded image (float in [0, 1], [3, H, W]) as the recipe's: uint8, rounded."""
    return (image.float().clamp(0, 1) * 255).round().to(torch.uint8)

