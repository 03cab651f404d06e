"""The recipe's job config: typed sections, and the one place where a default is written.

A job's settings come in four layers, each over the one before:

1. the field defaults below;
2. its preset, ``configs/<preset>.toml`` (``--preset``): only what differs from 1.;
3. a ``--config FILE.toml``;
4. flags on the command line.

A TOML layer holds sections (``[training]`` / ``lr = 3e-4``); keys at its top level are read as
the flags of the same name (``group-size = 6`` is ``--group-size 6``). Every field has a flag,
generated from the dataclasses (``--lr``; a boolean as ``--x`` / ``--no-x``). The sections of
the algorithms (``[nft]``, ``[flow_grpo]``) share their flags: ``--kl-weight`` sets the KL weight
of the algorithm the job runs, and a flag that algorithm does not have is a usage error.

Every actor receives the resulting frozen ``JobConfig``. Nothing here imports torch: the
driver parses its config before it starts Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

PRESETS_DIR = Path(__file__).resolve().parent / "configs"
# --algorithm name -> the module that implements it (``recipes.diffusion_nft.algorithms``). Written
# here, with the other choices of the command line, so that the config needs nothing of the
# algorithms (they depend on it, not it on them); dotted-path strings because that is the
# dispatch ``detaudit scan-rng`` follows (see the algorithms package's docstring).
ALGORITHM_MODULES = {
    "nft": "recipes.diffusion_nft.algorithms.nft",
    "flow-grpo": "recipes.diffusion_nft.algorithms.flow_grpo",
}
ALGORITHMS = tuple(ALGORITHM_MODULES)


def presets() -> tuple[str, ...]:
    """The preset names: the TOML files in ``configs/``."""
    return tuple(sorted(path.stem for path in PRESETS_DIR.glob("*.toml")))


def setting(default: Any, help: str, *, flag: str | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A config field: its default, its ``--help`` text, and its flag where that is not ``--<field-name>``."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": choices})


@dataclass(frozen=True)
class JobSettings:
    algorithm: str = setting("nft", "The loss: DiffusionNFT (ODE sampling) or Flow-GRPO (SDE sampling with "
                             "log-probs, clipped ratio objective).", choices=ALGORITHMS)
    rollouts: int = setting(3, "Rollouts, each followed by its optimizer steps and a weight sync.")
    seed: int = setting(42, "Root of every derived seed (seeds.py) and, under --deterministic-mode, of every "
                        "process's RNGs.")
    metrics_jsonl: Path | None = setting(None, "Metrics file (also $DETAUDIT_METRICS_JSONL and "
                                         "$MILES_METRICS_JSONL when set).")


@dataclass(frozen=True)
class ModelSettings:
    preset: str = setting("tiny", "Model shapes (random init) and the defaults of configs/<preset>.toml.",
                          choices=presets())
    model_path: str | None = setting(None, "Local SD3/SD3.5 diffusers directory (real weights; nothing is "
                                     "downloaded).")
    init_seed: int = setting(0, "Seed of the random-init weights of presets (and of the LoRA adapter).")
    lora_rank: int = setting(32, "LoRA rank on the attention projections.")
    lora_alpha: int = setting(64, "LoRA alpha.")
    scheduler_shift: float = setting(3.0, "SD3.5's flow-matching timestep shift.")


@dataclass(frozen=True)
class RolloutSettings:
    prompts: Path | None = setting(None, "Prompt file, one per line (default: a built-in set).")
    prompts_per_rollout: int = setting(2, "Prompts a rollout samples.")
    group_size: int = setting(4, "Samples per prompt.")
    steps: int = setting(10, "Sampler steps.")
    resolution: int = setting(32, "Image size in pixels.")
    sample_batch: int = setting(0, "Images sampled at once by an engine, and samples per no-grad forward (old "
                                "policy, reference) in training (0: all at once).")
    engine: str = setting("diffusers", "What samples: the recipe's diffusers loop in each engine actor, or an sglang "
                          "diffusion server per engine actor (needs the sglang environment: recipes/sglang/env.sh).",
                          choices=("diffusers", "sglang"))


@dataclass(frozen=True)
class RewardSettings:
    kind: str = setting("pickscore", "The reward model.", flag="--reward", choices=("pickscore", "compressibility"))
    pickscore_path: str | None = setting(None, "Local directory of yuvalkirstain/PickScore_v1.")
    pickscore_processor: str | None = setting(None, "Local directory of the "
                                              "laion/CLIP-ViT-H-14-laion2B-s32B-b79K processor.")
    preprocess: str = setting("processor", "How PickScore's images are prepared: the CLIP processor (PIL resampling, "
                              "as PickScore's own code) or torch (resize, crop and normalise as torch ops in one fixed "
                              "order: with a portable CPU profile, the same bits on every x86 CPU).",
                              flag="--reward-preprocess", choices=("processor", "torch"))


@dataclass(frozen=True)
class TrainingSettings:
    precision: str = setting("fp16", "Train compute dtype (fp16 with a grad scaler); the engines use it on CUDA.",
                             choices=("fp16", "bf16", "fp32"))
    lr: float = setting(3e-4, "AdamW learning rate.")
    weight_decay: float = setting(1e-4, "AdamW weight decay.")
    grad_clip: float = setting(1.0, "Grad-norm clip.")
    fused_optimizer: bool = setting(False, "AdamW's fused kernel, whose square root does not go through MKL. "
                                    "On CPU the default (foreach) AdamW takes its square root from MKL's "
                                    "vector math, whose bits differ between torch builds (their MKL) even "
                                    "under a portable CPU profile; the fused kernel's agreed.")
    grad_scaler_init: float = setting(2.0**16, "fp16 grad scaler's initial scale.")
    grad_scaler_backoff: float = setting(0.5, "Factor the scale is multiplied by after a step whose gradients "
                                         "overflowed.")
    train_batch_size: int | None = setting(None, "Samples per optimizer step (default: the whole rollout).")
    micro_batch: int = setting(0, "Samples per forward/backward inside an optimizer step (gradients accumulate; "
                               "0: the whole step).")
    activation_checkpointing: bool = setting(False, "Recompute each transformer block in the backward (less "
                                             "memory, ~1 extra forward).")
    fsdp_single_rank: bool = setting(False, "FSDP2 also at world size 1 (the plain module does the same "
                                     "arithmetic, without FSDP's per-block gather).")


@dataclass(frozen=True)
class NFTSettings:
    beta: float = setting(1.0, "Mixing of the implicit policies.")
    kl_weight: float = setting(1e-4, "Weight of the KL to the frozen base.")
    ema_slope: float = setting(0.001, "Old-policy EMA decay = min(slope * step, max).")
    ema_max: float = setting(0.5, "Largest old-policy EMA decay.")


@dataclass(frozen=True)
class FlowGRPOSettings:
    kl_weight: float = setting(0.04, "Weight of the KL to the frozen base.")
    noise_level: float = setting(0.7, "SDE noise level a (std = a * sqrt(sigma / (1 - sigma))).")
    clip_range: float = setting(1e-4, "PPO ratio clip range.")
    timestep_fraction: float = setting(0.99, "Train on the first int(steps * fraction) sampled transitions.")


@dataclass(frozen=True)
class DeterminismSettings:
    enabled: bool = setting(False, "Seed every process (driver and every Ray worker) and use deterministic "
                            "kernels.", flag="--deterministic-mode")
    seed_rollout_manager: bool = setting(True, "Under --deterministic-mode, seed the RolloutManager's RNGs too; "
                                         "--no-seed-rollout-manager leaves them unseeded (reproduces the real bug).")
    attention: str = setting("auto", "SDPA backends under --deterministic-mode: flash only (deterministic "
                             "backward), math only, or any (PyTorch picks); auto = flash on CUDA, math on CPU.",
                             choices=("auto", "flash", "math", "any"))
    fill_uninitialized_memory: bool = setting(True, "Under --deterministic-mode, let torch fill new uninitialised "
                                              "tensors with NaN (its default; off saves a kernel per allocation).")


@dataclass(frozen=True)
class InjectSettings:
    """Real bugs of RL pipelines, each off by default: a flag reproduces one for detaudit to name."""

    completion_order: bool = setting(False, "The RolloutManager takes the engines' outputs as they complete "
                                     "(ray.wait) and batches them in that order: the rollout depends on which engine "
                                     "finishes first.", flag="--collect-in-completion-order")
    engine_autocast: str = setting("none", "The engines run their transformer under torch.autocast in this dtype "
                                   "while the trainer recomputes in its own precision: the two forwards differ on "
                                   "the same inputs.", flag="--engine-autocast", choices=("none", "bf16", "fp16"))
    group_seed: bool = setting(False, "Every sample of a prompt's group gets the group's noise seeds (sample index 0): "
                               "a group of identical samples, zero advantage.", flag="--one-seed-per-group")


@dataclass(frozen=True)
class CompileSettings:
    blocks: bool = setting(False, "torch.compile each transformer block (engine and trainer; fused elementwise "
                           "kernels). Rollout 0 samples eagerly while the engines compile during its training. "
                           "Changes the numerics: a standard recorded without it does not hold with it.",
                           flag="--compile-blocks")


@dataclass(frozen=True)
class PlacementSettings:
    device: str = setting("auto", "Where the actors compute (auto: cuda when torch sees a GPU).",
                          choices=("auto", "cpu", "cuda"))
    train_actors: int = setting(1, "FSDP2 world size (1: plain module, no FSDP).")
    rollout_engines: int = setting(1, "Rollout engine actors.")
    colocate: bool = setting(True, "Put rollout engines on the train GPUs (else on GPUs of their own).")
    reward_gpu: bool | None = setting(None, "Give the reward actor a GPU of its own (default: when one is free).")
    threads: int = setting(1, "torch CPU threads per actor.")
    colocated_share: float = setting(0.5, "GPU share of a colocated train actor and engine each.")
    shared_reward_share: float = setting(0.01, "GPU share of a reward actor without a GPU of its own...")
    shared_gpu_share: float = setting(0.49, "...which leaves the train actor and the engine this much each.")


@dataclass(frozen=True)
class RaySettings:
    address: str | None = setting(None, "Ray cluster to join (host:port, or auto). Default: a Ray of this run's "
                                  "own, even where RAY_ADDRESS is set; a Ray job's driver (detaudit record "
                                  "--cluster) joins its job's cluster.", flag="--ray-address")
    num_cpus: int = setting(2, "CPUs the local Ray node reports. The actors ask for none: this only sizes the "
                            "pool of idle workers Ray prestarts, each a Python process competing with the actors' "
                            "start-up.")
    object_store_mb_cpu: int = setting(512, "Object store of a local Ray on the CPU (MiB).")
    object_store_mb_gpu: int = setting(4096, "Object store of a local Ray with GPUs (MiB).")


@dataclass(frozen=True)
class JobConfig:
    """Everything a job's actors need to know, by section (the TOML tables)."""

    job: JobSettings = JobSettings()
    model: ModelSettings = ModelSettings()
    rollout: RolloutSettings = RolloutSettings()
    reward: RewardSettings = RewardSettings()
    training: TrainingSettings = TrainingSettings()
    nft: NFTSettings = NFTSettings()
    flow_grpo: FlowGRPOSettings = FlowGRPOSettings()
    determinism: DeterminismSettings = DeterminismSettings()
    inject: InjectSettings = InjectSettings()
    compile: CompileSettings = CompileSettings()
    placement: PlacementSettings = PlacementSettings()
    ray: RaySettings = RaySettings()

    def replace(self, section: str, **changes: object) -> JobConfig:
        """A copy with fields of one section changed: ``config.replace("placement", device="cpu")``."""
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **changes)})

    @property
    def algorithm_settings(self) -> NFTSettings | FlowGRPOSettings:
        """The section of the algorithm this job runs."""
        return getattr(self, section_of_algorithm(self.job.algorithm))

    @property
    def samples_per_rollout(self) -> int:
        """Prompts per rollout times the group size: the default optimizer-step batch."""
        return self.rollout.prompts_per_rollout * self.rollout.group_size

    @property
    def attention_backend(self) -> str:
        """The SDPA backends the actors use under --deterministic-mode (``auto`` resolved)."""
        if self.determinism.attention != "auto":
            return self.determinism.attention
        return "flash" if self.placement.device == "cuda" else "math"


def section_of_algorithm(algorithm: str) -> str:
    """The JobConfig section holding an algorithm's own settings (``flow-grpo`` -> ``flow_grpo``)."""
    return algorithm.replace("-", "_")


SECTIONS: dict[str, type] = typing.get_type_hints(JobConfig)
ALGORITHM_SECTIONS = tuple(section_of_algorithm(name) for name in ALGORITHMS)
ALGORITHM = "<algorithm>"  # the section of a shared algorithm flag: the one the job runs


@dataclass(frozen=True)
class Setting:
    """One field of one section, with what its flag needs."""

    section: str
    name: str
    type: Any  # the field's type with None removed: int, float, str, bool or Path
    optional: bool
    default: Any
    help: str
    flag: str
    choices: tuple[str, ...] | None


def _settings() -> list[Setting]:
    out = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind, optional = _strip_none(hints[f.name])
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            out.append(Setting(section, f.name, kind, optional, f.default, f.metadata["help"], flag,
                               f.metadata.get("choices")))
    return out


def _strip_none(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


SETTINGS = _settings()
# flag -> (section, field); a flag of the algorithm sections maps to (ALGORITHM, field)
FLAGS: dict[str, tuple[str, str]] = {}
for _s in SETTINGS:
    _where = (ALGORITHM if _s.section in ALGORITHM_SECTIONS else _s.section, _s.name)
    if FLAGS.setdefault(_s.flag, _where) != _where:
        raise AssertionError(f"two job-config fields have the flag {_s.flag}")
FLAGS_BY_DEST = {f"{section}.{name}": flag for flag, (section, name) in FLAGS.items()}
PRESET_TABLES = {name: tomllib.loads((PRESETS_DIR / f"{name}.toml").read_text(encoding="utf-8")) for name in presets()}


def _default_text(setting: Setting) -> str:
    """'default: X' for --help, with the presets that change it."""
    shown = "none" if setting.default is None else ("on" if setting.default is True else "off"
                                                    if setting.default is False else repr(setting.default).strip("'"))
    text = f"default: {shown}"
    changed = [f"{name} {table[setting.section][setting.name]}" for name, table in PRESET_TABLES.items()
               if setting.name in table.get(setting.section, {})]
    return text + (f"; presets: {', '.join(changed)}" if changed else "")


def build_parser() -> argparse.ArgumentParser:
    """The command line, generated from the sections: one flag per field."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes.diffusion_nft", argument_default=argparse.SUPPRESS,
        description="SD3.5 DiffusionNFT or Flow-GRPO with a PickScore (or JPEG-compressibility) reward on Ray: "
        "rollout engines, reward actor, rollout manager and FSDP2 train actors. Writes miles-style metrics JSONL. "
        "Settings: field defaults < configs/<preset>.toml < --config FILE < flags.",
    )
    parser.add_argument("--config", type=Path, help="TOML file of job-config sections ([training] lr = 3e-4), "
                        "or of flags at its top level (lr = 3e-4); flags given on the command line win.")
    groups: dict[str, Any] = {}
    shared: dict[str, list[Setting]] = {}
    for s in SETTINGS:
        if s.section in ALGORITHM_SECTIONS:
            shared.setdefault(s.flag, []).append(s)
            continue
        group = groups.setdefault(s.section, parser.add_argument_group(f"[{s.section}]"))
        _add_flag(group, s, f"{s.section}.{s.name}", f"{s.help} ({_default_text(s)})")
    group = parser.add_argument_group("[nft], [flow_grpo]: settings of the algorithm the job runs")
    for owners in shared.values():
        defaults = ", ".join(f"{s.section}: {s.default}" for s in owners)
        _add_flag(group, owners[0], f"{ALGORITHM}.{owners[0].name}", f"{owners[0].help} (default: {defaults})")
    return parser


def _add_flag(group: Any, s: Setting, dest: str, help: str) -> None:
    if s.type is bool:
        group.add_argument(s.flag, dest=dest, action=argparse.BooleanOptionalAction, help=help)
    else:
        group.add_argument(s.flag, dest=dest, type=s.type, choices=s.choices, help=help,
                           metavar=s.name.upper() if s.choices is None else None)


# A layer: (section or ALGORITHM, field, value, where it was set) in the order given.
Layer = list[tuple[str, str, Any, str]]


def _toml_layer(path: Path, parser: argparse.ArgumentParser) -> Layer:
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        parser.error(f"{path}: {exc}")
    layer: Layer = []
    for key, value in table.items():
        if isinstance(value, dict):
            section = key.replace("-", "_")
            if section not in SECTIONS:
                parser.error(f"{path}: unknown job-config section [{key}]")
            names = {f.name for f in dataclasses.fields(SECTIONS[section])}
            for name, item in value.items():
                if name.replace("-", "_") not in names:
                    parser.error(f"{path}: unknown job-config key {name!r} in [{key}]")
                layer.append((section, name.replace("-", "_"), item, f"{path}: [{key}] {name}"))
            continue
        where = FLAGS.get("--" + key.replace("_", "-"))
        if where is None:
            parser.error(f"{path}: unknown job-config key {key!r}")
        layer.append((*where, value, f"{path}: {key}"))
    return layer


def _setting(section: str, name: str) -> Setting:
    return next(s for s in SETTINGS if s.section == section and s.name == name)


def _value(s: Setting, value: Any, where: str, parser: argparse.ArgumentParser) -> Any:
    """A TOML or flag value as the field's type; a usage error when it is not one."""
    if value is None and s.optional:
        return None
    if s.type is float and type(value) is int:
        value = float(value)
    elif s.type is Path and isinstance(value, str):
        value = Path(value)
    if type(value) is not s.type and not (s.type is Path and isinstance(value, Path)):
        parser.error(f"{where}: expected {s.type.__name__}, got {value!r}")
    if s.choices is not None and value not in s.choices:
        parser.error(f"{where}: {value!r} is not one of {', '.join(s.choices)}")
    return value


def parse_args(argv: list[str] | None = None) -> JobConfig:
    """The job config of a command line (``sys.argv[1:]`` when None); usage errors exit 2."""
    parser = build_parser()
    given = vars(parser.parse_args(argv))
    config_file = given.pop("config", None)
    flags: Layer = [(*dest.split(".", 1), value, FLAGS_BY_DEST[dest]) for dest, value in given.items()]
    from_file = _toml_layer(config_file, parser) if config_file else []
    preset = _last(flags, "model", "preset") or _last(from_file, "model", "preset") or ModelSettings.preset
    if preset not in PRESET_TABLES:
        parser.error(f"unknown preset {preset!r} (one of {', '.join(PRESET_TABLES)})")
    from_preset = _toml_layer(PRESETS_DIR / f"{preset}.toml", parser)
    if _last(from_preset, "model", "preset") not in (None, preset):
        parser.error(f"configs/{preset}.toml: a preset does not name another preset")
    layers = from_preset + from_file + flags
    algorithm = _last(layers, "job", "algorithm") or JobSettings.algorithm
    if algorithm not in ALGORITHMS:
        parser.error(f"unknown algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")
    values: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for section, name, value, where in layers:
        if section == ALGORITHM:
            section = section_of_algorithm(algorithm)
            if name not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
                parser.error(f"{where}: not a setting of --algorithm {algorithm}")
        values[section][name] = _value(_setting(section, name), value, where, parser)
    config = JobConfig(**{section: SECTIONS[section](**fields) for section, fields in values.items()})
    if config.training.train_batch_size is None:
        config = config.replace("training", train_batch_size=config.samples_per_rollout)
    for problem in problems(config):
        parser.error(problem)
    return config



def _last(layer: Layer, section: str, name: str) -> Any:
    found = [value for s, n, value, _ in layer if (s, n) == (section, name)]
    return found[-1] if found else None


def problems(config: JobConfig) -> list[str]:
    """What makes a config unrunnable, as usage errors that name the flags."""
    out = []
    counts = {"--rollouts": config.job.rollouts, "--prompts-per-rollout": config.rollout.prompts_per_rollout,
              "--group-size": config.rollout.group_size, "--steps": config.rollout.steps,
              "--train-actors": config.placement.train_actors, "--rollout-engines": config.placement.rollout_engines}
    out += [f"{flag} must be at least 1" for flag, value in counts.items() if value < 1]
    if config.rollout.group_size < 2:
        out.append("--group-size must be at least 2 (advantages are relative to the prompt's group)")
    grpo = config.flow_grpo
    if not 0 < grpo.timestep_fraction <= 1:
        out.append("--timestep-fraction must be in (0, 1]")
    if grpo.noise_level <= 0 or grpo.clip_range <= 0:
        out.append("--noise-level and --clip-range must be positive")
    if config.rollout.engine == "sglang" and config.compile.blocks:
        out.append("--compile-blocks compiles the diffusers engine's blocks: not with --engine sglang")
    if (config.training.train_batch_size or 0) % config.placement.train_actors:
        out.append("--train-batch-size must be a multiple of --train-actors")
    return out
