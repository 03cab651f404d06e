"""The recipe's typed job config: flags, a --config TOML file, presets, and the settings moved out of the actors."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.diffusion_nft.config import JobConfig, parse_args
from recipes.diffusion_nft.pipeline import gpu_shares


def test_flags_become_a_typed_config_with_preset_defaults() -> None:
    cfg = parse_args(["--preset", "sd35m-shapes", "--lr", "1e-3"])
    assert isinstance(cfg, JobConfig)
    assert (cfg.resolution, cfg.micro_batch, cfg.sample_batch, cfg.lr) == (512, 32, 32, 1e-3)
    assert cfg.train_batch_size == 64 and cfg.weight_decay == 1e-4 and cfg.grad_clip == 1.0
    with pytest.raises(Exception):
        cfg.lr = 1.0  # frozen: every actor sees the same job


def test_config_file_sets_fields_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('lr = 0.002\ngroup-size = 6\nweight_decay = 0.05\ngrad_clip = 0.5\nscheduler_shift = 1.0\n'
                    'activation_checkpointing = true\n')
    cfg = parse_args(["--config", str(path), "--lr", "0.003"])
    assert (cfg.lr, cfg.group_size, cfg.weight_decay, cfg.grad_clip, cfg.scheduler_shift) == (0.003, 6, 0.05, 0.5, 1.0)
    assert cfg.activation_checkpointing and cfg.train_batch_size == 2 * 6


def test_config_file_with_an_unknown_key_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "job.toml"
    path.write_text("learning_rate = 0.1\n")
    with pytest.raises(SystemExit) as exc:
        parse_args(["--config", str(path)])
    assert exc.value.code == 2
    assert "unknown job-config key 'learning_rate'" in capsys.readouterr().err


def test_attention_auto_is_flash_on_cuda_and_math_on_cpu() -> None:
    cfg = parse_args([])
    assert cfg.replace(device="cuda").attention_backend == "flash"
    assert cfg.replace(device="cpu").attention_backend == "math"
    assert parse_args(["--attention", "math"]).replace(device="cuda").attention_backend == "math"


def test_gpu_shares_come_from_the_config() -> None:
    cfg = parse_args(["--device", "cuda"])
    shared = gpu_shares(cfg, 1)
    assert shared == {"train": 0.49, "engine": 0.49, "reward": 0.01}
    assert shared["train"] + shared["engine"] + shared["reward"] <= 1.0
    own = gpu_shares(cfg.replace(shared_reward_share=0.02, shared_gpu_share=0.4), 1)
    assert own == {"train": 0.4, "engine": 0.4, "reward": 0.02}
    assert gpu_shares(cfg, 2) == {"train": 0.5, "engine": 0.5, "reward": 1.0}


def test_fill_uninitialized_memory_flag_and_config_key(tmp_path: Path) -> None:
    assert parse_args([]).fill_uninitialized_memory is True
    assert parse_args(["--no-fill-uninitialized-memory"]).fill_uninitialized_memory is False
    path = tmp_path / "job.toml"
    path.write_text("fill_uninitialized_memory = false\n")
    assert parse_args(["--config", str(path)]).fill_uninitialized_memory is False
