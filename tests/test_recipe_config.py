"""The recipe's job config (typed sections: the only defaults; preset TOMLs; a --config TOML; flags),
the algorithm protocol its modules implement, the derived seeds, and which Ray a run uses."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import tomllib
import typing
from pathlib import Path

import pytest
from conftest import REPO

from recipes.diffusion_nft import algorithms, seeds
from recipes.diffusion_nft.config import (ALGORITHM_MODULES, ALGORITHMS, PRESET_TABLES, SECTIONS, SETTINGS, JobConfig, build_parser,
                                          parse_args, section_of_algorithm)
from recipes.diffusion_nft.placement import RAY_JOB_ENV, cluster_address, gpu_shares

pytestmark = pytest.mark.recipe
CARDS = sorted((REPO / "recipes").glob("*.toml"))


def card_argv(card: Path) -> list[str]:
    return tomllib.loads(card.read_text())["command"][3:]  # after {python} -m recipes.diffusion_nft


def test_flags_become_a_typed_sectioned_config_with_preset_defaults() -> None:
    cfg = parse_args(["--preset", "sd35m-shapes", "--lr", "1e-3"])
    assert isinstance(cfg, JobConfig)
    assert (cfg.rollout.resolution, cfg.training.micro_batch, cfg.rollout.sample_batch, cfg.training.lr) == (
        512, 32, 32, 1e-3)
    assert cfg.training.train_batch_size == 64 and cfg.placement.threads == 4
    assert cfg.training.weight_decay == 1e-4 and cfg.training.grad_clip == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.lr = 1.0  # frozen: every actor sees the same job
    tiny = parse_args([])
    assert (tiny.model.preset, tiny.rollout.resolution, tiny.training.train_batch_size) == ("tiny", 32, 8)
    assert cfg.replace("placement", device="cpu").placement.device == "cpu" and cfg.placement.device == "auto"


def test_a_preset_sets_only_fields_whose_default_it_changes() -> None:
    """Defaults are written once: a preset TOML holds real fields, each set to another value."""
    from recipes.diffusion_nft.models import SHAPES

    assert set(PRESET_TABLES) == set(SHAPES) == {"tiny", "sd35m-shapes"}
    assert PRESET_TABLES["tiny"] == {}
    defaults = JobConfig()
    for name, table in PRESET_TABLES.items():
        for section, fields in table.items():
            for key, value in fields.items():
                assert value != getattr(getattr(defaults, section), key), (name, section, key)


def test_every_field_has_one_flag_with_its_generated_help() -> None:
    parser = build_parser()
    flags = {opt for action in parser._actions for opt in action.option_strings}
    for s in SETTINGS:
        assert s.flag in flags, s
    text = parser.format_help()
    assert "--lr LR" in text and "(default: 0.0003)" in " ".join(text.split())
    assert "default: 32; presets: sd35m-shapes 512" in " ".join(text.split())  # --resolution
    assert "--no-seed-rollout-manager" in text and "--ray-address" in text
    # The algorithm sections share one --kl-weight, whose help names each default.
    assert "(default: nft: 0.0001, flow_grpo: 0.04)" in " ".join(text.split())


def test_every_cards_flags_still_parse() -> None:
    by_name = {card.stem: parse_args(card_argv(card)) for card in CARDS}
    nft = by_name["sd3_pickscore_nft"]
    assert (nft.job.algorithm, nft.model.preset, nft.job.rollouts, nft.determinism.enabled) == ("nft", "tiny", 3, True)
    assert (nft.training.precision, nft.training.grad_scaler_init, nft.training.grad_scaler_backoff) == (
        "fp16", 2.0**40, 2.0**-20)
    assert nft.ray.num_cpus == 2 and nft.determinism.seed_rollout_manager
    grpo = by_name["sd3_compress_flow_grpo"]
    assert (grpo.job.algorithm, grpo.reward.kind, grpo.training.train_batch_size, grpo.training.lr) == (
        "flow-grpo", "compressibility", 4, 3e-3)
    gpu = by_name["sd3_pickscore_nft_gpu"]
    assert gpu.compile.blocks and not gpu.determinism.fill_uninitialized_memory and gpu.placement.device == "cuda"
    assert by_name["sd3_pickscore_nft_gpu2"].placement.reward_gpu is True


def test_config_file_sections_and_top_level_flags_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('lr = 0.002\ngroup-size = 6\n\n[training]\nweight_decay = 0.05\ngrad_clip = 0.5\n'
                    'activation_checkpointing = true\n\n[model]\nscheduler_shift = 1\n')
    cfg = parse_args(["--config", str(path), "--lr", "0.003"])
    assert (cfg.training.lr, cfg.rollout.group_size, cfg.training.weight_decay, cfg.training.grad_clip) == (
        0.003, 6, 0.05, 0.5)
    assert cfg.model.scheduler_shift == 1.0 and type(cfg.model.scheduler_shift) is float
    assert cfg.training.activation_checkpointing and cfg.training.train_batch_size == 2 * 6
    # A --config file may pick the preset; its preset's defaults apply under the file's values.
    path.write_text('[model]\npreset = "sd35m-shapes"\n[rollout]\ngroup_size = 3\n')
    cfg = parse_args(["--config", str(path)])
    assert (cfg.rollout.resolution, cfg.rollout.group_size, cfg.training.train_batch_size) == (512, 3, 24)


@pytest.mark.parametrize("text, error", [
    ("learning_rate = 0.1\n", "unknown job-config key 'learning_rate'"),
    ("[optimizer]\nlr = 0.1\n", "unknown job-config section [optimizer]"),
    ("[training]\nlearning_rate = 0.1\n", "unknown job-config key 'learning_rate' in [training]"),
    ('[training]\nlr = "fast"\n', "[training] lr: expected float, got 'fast'"),
    ('[training]\nprecision = "fp8"\n', "'fp8' is not one of fp16, bf16, fp32"),
    ("group-size = 1\n", "--group-size must be at least 2"),
    ("lr = \n", "job.toml: "),
    ('[model]\npreset = "huge"\n', "unknown preset 'huge' (one of sd35m-shapes, tiny)"),
])
def test_bad_config_files_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture, text: str,
                                           error: str) -> None:
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        parse_args(["--config", str(path)])
    assert exc.value.code == 2
    assert error in capsys.readouterr().err


def test_algorithm_flags_set_the_section_of_the_algorithm_the_job_runs(capsys: pytest.CaptureFixture) -> None:
    assert parse_args([]).nft.kl_weight == 1e-4 and parse_args([]).flow_grpo.kl_weight == 0.04
    nft = parse_args(["--kl-weight", "0"])
    assert nft.nft.kl_weight == 0.0 and nft.flow_grpo.kl_weight == 0.04 and nft.algorithm_settings is nft.nft
    grpo = parse_args(["--algorithm", "flow-grpo", "--kl-weight", "0", "--clip-range", "0.2"])
    assert grpo.flow_grpo.kl_weight == 0.0 and grpo.nft.kl_weight == 1e-4 and grpo.flow_grpo.clip_range == 0.2
    assert grpo.algorithm_settings is grpo.flow_grpo
    with pytest.raises(SystemExit) as exc:
        parse_args(["--algorithm", "flow-grpo", "--beta", "2"])
    assert exc.value.code == 2 and "--beta: not a setting of --algorithm flow-grpo" in capsys.readouterr().err


def test_attention_auto_is_flash_on_cuda_and_math_on_cpu() -> None:
    cfg = parse_args([])
    assert cfg.replace("placement", device="cuda").attention_backend == "flash"
    assert cfg.replace("placement", device="cpu").attention_backend == "math"
    assert parse_args(["--attention", "math"]).replace("placement", device="cuda").attention_backend == "math"


def test_gpu_shares_come_from_the_config() -> None:
    cfg = parse_args(["--device", "cuda"])
    shared = gpu_shares(cfg, 1)
    assert shared == {"train": 0.49, "engine": 0.49, "reward": 0.01}
    assert shared["train"] + shared["engine"] + shared["reward"] <= 1.0
    own = gpu_shares(cfg.replace("placement", shared_reward_share=0.02, shared_gpu_share=0.4), 1)
    assert own == {"train": 0.4, "engine": 0.4, "reward": 0.02}
    assert gpu_shares(cfg, 2) == {"train": 0.5, "engine": 0.5, "reward": 1.0}
    assert gpu_shares(cfg.replace("placement", device="cpu"), 2) == {"train": 0, "engine": 0, "reward": 0}


def test_boolean_flags_and_config_keys(tmp_path: Path) -> None:
    assert parse_args([]).determinism.fill_uninitialized_memory is True
    assert parse_args(["--no-fill-uninitialized-memory"]).determinism.fill_uninitialized_memory is False
    assert parse_args(["--no-seed-rollout-manager"]).determinism.seed_rollout_manager is False
    path = tmp_path / "job.toml"
    path.write_text("[determinism]\nfill_uninitialized_memory = false\nenabled = true\n")
    cfg = parse_args(["--config", str(path)])
    assert cfg.determinism.fill_uninitialized_memory is False and cfg.determinism.enabled is True
    assert parse_args(["--config", str(path), "--no-deterministic-mode"]).determinism.enabled is False


def test_a_local_run_starts_its_own_ray_unless_it_is_a_ray_job_or_names_a_cluster() -> None:
    cfg = parse_args([])
    # A RAY_ADDRESS in the environment (a shell, a `ray start` here) is not where this run goes.
    assert cluster_address(cfg, {"RAY_ADDRESS": "10.0.0.1:6379"}) is None
    assert cluster_address(cfg, {}) is None
    # The driver of a Ray job (detaudit record --cluster) joins its job's cluster.
    assert cluster_address(cfg, {RAY_JOB_ENV: "{}", "RAY_ADDRESS": "10.0.0.1:6379"}) == "10.0.0.1:6379"
    with pytest.raises(SystemExit, match="RAY_ADDRESS is not"):
        cluster_address(cfg, {RAY_JOB_ENV: "{}"})
    named = parse_args(["--ray-address", "auto"])
    assert cluster_address(named, {}) == "auto"
    # The name Ray's job supervisor uses, as the installed Ray spells it.
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    assert RAY_JOB_CONFIG_JSON_ENV_VAR == RAY_JOB_ENV


def test_each_algorithm_is_a_module_that_implements_the_protocol() -> None:
    assert tuple(ALGORITHM_MODULES) == ALGORITHMS == ("nft", "flow-grpo")
    members = [name for name in dir(algorithms.Algorithm) if not name.startswith("_")]
    members += list(typing.get_type_hints(algorithms.Algorithm))
    assert {"sample", "train_data", "rollout_metrics", "start_step", "update_old_policy", "ROLLOUT_KEYS",
            "TRAIN_FORWARDS_PER_TIMESTEP"} <= set(members)
    for name, module_path in ALGORITHM_MODULES.items():
        module = importlib.import_module(module_path)
        missing = [m for m in members if not hasattr(module, m)]
        assert not missing, (name, missing)
        assert section_of_algorithm(name) in SECTIONS  # its settings: [nft], [flow_grpo]


def test_the_config_imports_nothing_of_the_algorithms_they_import_it() -> None:
    """No circle between the config and the algorithms, a TYPE_CHECKING one included (#40)."""
    import ast

    def imported(path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        return found

    package = REPO / "recipes" / "diffusion_nft"
    assert not {m for m in imported(package / "config.py") if m.startswith("recipes.")}
    assert "recipes.diffusion_nft.config" in imported(package / "algorithms" / "__init__.py")


def test_the_config_and_the_algorithm_protocol_import_no_torch() -> None:
    """The driver parses its config and starts Ray before it imports torch."""
    import subprocess

    code = ("import sys; import recipes.diffusion_nft.config, recipes.diffusion_nft.algorithms, "
            "recipes.diffusion_nft.seeds; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_derived_seeds_are_named_once_and_keep_their_streams_apart() -> None:
    weights = [seeds.weights(0, c) for c in seeds.WEIGHT_COMPONENTS]
    assert len(set(weights)) == len(weights)
    assert seeds.weights(7, "lora") - seeds.weights(0, "lora") == 7
    assert seeds.rollout(42, 0) != seeds.rollout(42, 1) != seeds.rollout(43, 0)
    rollout = seeds.rollout(42, 1)
    samples = [(p, s) for p in range(3) for s in range(4)]
    initial = {seeds.initial_noise(rollout, p, s) for p, s in samples}
    sde = {seeds.sde_noise(rollout, p, s) for p, s in samples}
    assert len(initial) == len(sde) == 12 and not initial & sde
    assert all(0 <= x < 2**63 for x in initial | sde)
    forward = {seeds.forward_noise(42, 1, offset, k, rank) for offset in (0, 4) for k in range(9) for rank in (0, 1)}
    assert len(forward) == 2 * 9 * 2


def test_every_recipe_module_imports() -> None:
    # An actor module that fails to import only shows when Ray starts that actor: on the GPU cards,
    # after a device machine was paid for (sglang_engine's import of a name that had moved, #42).
    import pkgutil

    import recipes.diffusion_nft as recipe

    names = [m.name for m in pkgutil.walk_packages(recipe.__path__, "recipes.diffusion_nft.")
             if not m.name.endswith("__main__")]  # __main__ runs the recipe
    assert "recipes.diffusion_nft.actors.sglang_engine" in names
    for name in names:
        importlib.import_module(name)
