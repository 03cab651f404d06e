"""The recipe's job config (DiffusionNFT or Flow-GRPO on one pipeline): a typed dataclass,
from a TOML file and flags.

Every actor receives one ``JobConfig``. Precedence: a flag on the command line, then the
``--config`` TOML file, then the preset's (and the algorithm's) defaults, then the field
defaults below.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

ALGORITHMS = ("nft", "flow-grpo")
# Per-algorithm defaults; a flag given on the command line wins.
KL_WEIGHT_DEFAULTS = {"nft": 1e-4, "flow-grpo": 0.04}

# Per-preset defaults; a flag given on the command line wins.
PRESET_DEFAULTS = {
    "tiny": dict(resolution=32, prompts_per_rollout=2, group_size=4, steps=10, threads=1, micro_batch=0, sample_batch=0),
    "sd35m-shapes": dict(resolution=512, prompts_per_rollout=8, group_size=8, steps=10, threads=4, micro_batch=32, sample_batch=32),
}

BUILTIN_PROMPTS = (
    "a photo of a red fox in fresh snow",
    "an astronaut riding a horse on the moon",
    "a watercolor painting of a lighthouse at dawn",
    "a bowl of ramen with a soft boiled egg",
    "a cat wearing a tiny wizard hat",
    "a futuristic city skyline at night, neon lights",
    "an oil painting of sunflowers in a blue vase",
    "a steaming cup of coffee on a wooden table",
    "a small cabin in a pine forest under the milky way",
    "a portrait of an old sailor with a white beard",
    "a bicycle leaning against a yellow wall",
    "a koi pond with lily pads, top-down view",
    "a dragon made of origami paper",
    "a rainy street in tokyo reflected in puddles",
    "a macro photo of a honeybee on lavender",
    "a vintage robot reading a newspaper",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m recipes.diffusion_nft",
        description="SD3.5 DiffusionNFT or Flow-GRPO with a PickScore (or JPEG-compressibility) reward on Ray: "
        "rollout engines, reward actor, rollout manager and FSDP2 train actors. Writes miles-style metrics JSONL.",
    )
    p.add_argument("--config", type=Path, help="TOML file of job-config fields (names as the flags, '-' or '_'); "
                   "flags given on the command line win.")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="nft",
                   help="The loss: DiffusionNFT (ODE sampling) or Flow-GRPO (SDE sampling with log-probs, "
                   "clipped ratio objective).")
    p.add_argument("--preset", choices=sorted(PRESET_DEFAULTS), default="tiny")
    p.add_argument("--model-path", help="Local SD3/SD3.5 diffusers directory (real weights; nothing is downloaded).")
    p.add_argument("--reward", choices=["pickscore", "compressibility"], default="pickscore")
    p.add_argument("--pickscore-path", help="Local directory of yuvalkirstain/PickScore_v1.")
    p.add_argument("--pickscore-processor", help="Local directory of the laion/CLIP-ViT-H-14-laion2B-s32B-b79K processor.")
    p.add_argument("--prompts", type=Path, help="Prompt file, one per line (default: a built-in set).")
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--prompts-per-rollout", type=int)
    p.add_argument("--group-size", type=int, help="Samples per prompt.")
    p.add_argument("--steps", type=int, help="Sampler steps (SD3 flow matching, shift 3.0 unless the config file sets scheduler_shift).")
    p.add_argument("--resolution", type=int)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--init-seed", type=int, default=0, help="Seed of the random-init weights of presets.")
    p.add_argument("--deterministic-mode", action="store_true",
                   help="Seed every process (driver and every Ray worker) and use deterministic kernels.")
    p.add_argument("--no-seed-rollout-manager", action="store_true",
                   help="Leave the RolloutManager's global torch RNG unseeded (reproduces the real bug).")
    p.add_argument("--attention", choices=["auto", "flash", "math", "any"], default="auto",
                   help="SDPA backends under --deterministic-mode: flash only (deterministic backward), math "
                   "only, or any (PyTorch picks); auto = flash on CUDA, math on CPU.")
    p.add_argument("--fill-uninitialized-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="Under --deterministic-mode, let torch fill new uninitialised tensors with NaN "
                   "(its default; --no-fill-uninitialized-memory saves a kernel per allocation).")
    p.add_argument("--compile-blocks", action=argparse.BooleanOptionalAction, default=False,
                   help="torch.compile each transformer block (engine and trainer; fused elementwise kernels). "
                   "Rollout 0 samples eagerly while the engines compile during its training. "
                   "Changes the numerics: a standard recorded without it does not hold with it.")
    p.add_argument("--precision", choices=["fp16", "bf16", "fp32"], default="fp16")
    p.add_argument("--grad-scaler-init", type=float, default=2.0**16, help="fp16 grad scaler's initial scale.")
    p.add_argument("--grad-scaler-backoff", type=float, default=0.5,
                   help="Factor the scale is multiplied by after a step whose gradients overflowed.")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--beta", type=float, default=1.0, help="NFT: mixing of the implicit policies.")
    p.add_argument("--kl-weight", type=float,
                   help="Weight of the KL to the frozen base (default: 1e-4 for nft, 0.04 for flow-grpo).")
    p.add_argument("--noise-level", type=float, default=0.7,
                   help="Flow-GRPO: SDE noise level a (std = a * sqrt(sigma / (1 - sigma))).")
    p.add_argument("--clip-range", type=float, default=1e-4, help="Flow-GRPO: PPO ratio clip range.")
    p.add_argument("--timestep-fraction", type=float, default=0.99,
                   help="Flow-GRPO: train on the first int(steps * fraction) sampled transitions.")
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--lora-alpha", type=int, default=64)
    p.add_argument("--ema-slope", type=float, default=0.001, help="NFT: old-policy EMA decay = min(slope*step, max) (Flow-GRPO samples on-policy).")
    p.add_argument("--ema-max", type=float, default=0.5)
    p.add_argument("--train-batch-size", type=int, help="Samples per optimizer step (default: the whole rollout).")
    p.add_argument("--sample-batch", type=int, help="Images sampled at once by an engine, and samples per no-grad "
                   "forward (old policy, reference) in training (default: the preset's).")
    p.add_argument("--micro-batch", type=int, help="Samples per forward/backward inside an optimizer step "
                   "(gradients accumulate; default: the preset's).")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="Recompute each transformer block in the backward (less memory, ~1 extra forward).")
    p.add_argument("--train-actors", type=int, default=1, help="FSDP2 world size (1: plain module, no FSDP).")
    p.add_argument("--rollout-engines", type=int, default=1)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--colocate", action=argparse.BooleanOptionalAction, default=True,
                   help="Put rollout engines on the train GPUs (else on GPUs of their own).")
    p.add_argument("--reward-gpu", action=argparse.BooleanOptionalAction, default=None,
                   help="Give the reward actor a GPU of its own (default: when one is free).")
    p.add_argument("--threads", type=int, help="torch CPU threads per actor.")
    p.add_argument("--num-cpus", type=int, default=JobConfig.num_cpus,
                   help="CPUs the local Ray node reports (default 2). The actors ask for none: this only sizes "
                        "the pool of idle workers Ray prestarts, each a Python process competing with the "
                        "actors' start-up.")
    p.add_argument("--metrics-jsonl", type=Path, help="Default: $DETAUDIT_METRICS_JSONL or $MILES_METRICS_JSONL.")
    return p


@dataclass(frozen=True)
class JobConfig:
    """Everything a job's actors need to know. Flag-backed fields first, then settings that
    only a ``--config`` file changes (formerly constants in the actors and the pipeline)."""

    algorithm: str = "nft"
    preset: str = "tiny"
    model_path: str | None = None
    reward: str = "pickscore"
    pickscore_path: str | None = None
    pickscore_processor: str | None = None
    prompts: Path | None = None
    rollouts: int = 3
    prompts_per_rollout: int = 2
    group_size: int = 4
    steps: int = 10
    resolution: int = 32
    seed: int = 42
    init_seed: int = 0
    deterministic_mode: bool = False
    no_seed_rollout_manager: bool = False
    attention: str = "auto"
    fill_uninitialized_memory: bool = True
    compile_blocks: bool = False
    precision: str = "fp16"
    grad_scaler_init: float = 2.0**16
    grad_scaler_backoff: float = 0.5
    lr: float = 3e-4
    beta: float = 1.0
    kl_weight: float = 1e-4
    noise_level: float = 0.7
    clip_range: float = 1e-4
    timestep_fraction: float = 0.99
    lora_rank: int = 32
    lora_alpha: int = 64
    ema_slope: float = 0.001
    ema_max: float = 0.5
    train_batch_size: int = 8
    sample_batch: int = 0
    micro_batch: int = 0
    activation_checkpointing: bool = False
    train_actors: int = 1
    rollout_engines: int = 1
    device: str = "auto"
    colocate: bool = True
    reward_gpu: bool | None = None
    threads: int = 1
    num_cpus: int = 2
    metrics_jsonl: Path | None = None
    config: Path | None = None
    fsdp_single_rank: bool = False  # FSDP2 also at world size 1 (the plain module does the same arithmetic)
    # Optimiser and sampler settings.
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    scheduler_shift: float = 3.0  # SD3.5's flow-matching timestep shift
    # Ray placement: GPU shares on a shared GPU, and the object store.
    colocated_share: float = 0.5  # train actor and engine halves of one GPU
    shared_reward_share: float = 0.01  # a reward actor without a GPU of its own...
    shared_gpu_share: float = 0.49  # ...leaves the train actor and engine this much each
    object_store_mb_cpu: int = 512
    object_store_mb_gpu: int = 4096

    def replace(self, **changes: object) -> "JobConfig":
        return dataclasses.replace(self, **changes)

    @property
    def attention_backend(self) -> str:
        """The SDPA backends the actors use under --deterministic-mode (``auto`` resolved)."""
        if self.attention != "auto":
            return self.attention
        return "flash" if self.device == "cuda" else "math"


FIELDS = {f.name for f in dataclasses.fields(JobConfig)}


def read_config_file(path: Path, parser: argparse.ArgumentParser) -> dict[str, object]:
    """The fields of a ``--config`` TOML file (a flat table); unknown keys are an error."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        parser.error(f"{path}: {exc}")
    values = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in FIELDS or name == "config" or isinstance(value, dict):
            parser.error(f"{path}: unknown job-config key {key!r}")
        values[name] = value
    return values


def parse_args(argv: list[str] | None = None) -> JobConfig:
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path)
    known, _ = pre.parse_known_args(argv)
    from_file = read_config_file(known.config, parser) if known.config else {}
    dests = set(vars(parser.parse_args([])))
    parser.set_defaults(**{k: v for k, v in from_file.items() if k in dests})
    args = parser.parse_args(argv)
    for key, value in PRESET_DEFAULTS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.kl_weight is None:
        args.kl_weight = KL_WEIGHT_DEFAULTS[args.algorithm]
    if args.train_batch_size is None:
        args.train_batch_size = args.prompts_per_rollout * args.group_size
    for name in ("rollouts", "prompts_per_rollout", "group_size", "steps", "train_actors", "rollout_engines"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.group_size < 2:
        parser.error("--group-size must be at least 2 (advantages are relative to the prompt's group)")
    if not 0 < args.timestep_fraction <= 1:
        parser.error("--timestep-fraction must be in (0, 1]")
    if args.noise_level <= 0 or args.clip_range <= 0:
        parser.error("--noise-level and --clip-range must be positive")
    if args.train_batch_size % args.train_actors:
        parser.error("--train-batch-size must be a multiple of --train-actors")
    values = vars(args)
    for path_field in ("prompts", "metrics_jsonl"):
        if isinstance(values[path_field], str):
            values[path_field] = Path(values[path_field])
    values.update({k: v for k, v in from_file.items() if k not in dests})
    return JobConfig(**values)


def load_prompts(path: Path | None) -> list[str]:
    if path is None:
        return list(BUILTIN_PROMPTS)
    prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise SystemExit(f"{path}: no prompts")
    return prompts


def rollout_prompts(prompts: list[str], rollout: int, count: int, seed: int) -> list[tuple[int, str]]:
    """The (index, prompt) pairs of a rollout: a fixed function of (seed, rollout), no RNG state."""
    ranked = sorted(range(len(prompts)),
                    key=lambda i: hashlib.sha256(f"{seed}:{rollout}:{i}".encode()).hexdigest())
    return [(i, prompts[i]) for i in ranked[:count]]
