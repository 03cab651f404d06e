"""detaudit doctor: rows per process (run start, driver, a real Ray worker), a fix per failing row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detaudit.data.card import load_card
from detaudit.env.doctor import evaluate, run_doctor

from conftest import run_cli, write_card

GOOD = {
    "env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring", "PYTHONHASHSEED": "0"},
    "hash_randomization": 0, "torch": "2.13.0", "cuda_available": True, "deterministic_algorithms": True,
    "cudnn_deterministic": True, "cudnn_benchmark": False, "tf32_matmul": False, "tf32_cudnn": False,
    "float32_matmul_precision": "highest", "sdpa": {"flash": False, "mem_efficient": False, "cudnn": False, "math": True},
    "torch_initial_seed": 7, "numpy_mt0": 7,
}


def failing(facts: dict, gpus: int = 2) -> dict[str, str]:
    return {r.check: r.fix for r in evaluate("p", facts, seed=7, gpus_per_run=gpus, at_start=False) if not r.ok}


def test_each_row_fails_with_a_fix() -> None:
    assert failing(GOOD) == {}
    assert "PYTHONHASHSEED" in failing({**GOOD, "hash_randomization": 1, "env": {**GOOD["env"], "PYTHONHASHSEED": "random"}})
    # A fixed nonzero seed is deterministic too (CPython still reports randomization on for it).
    assert "PYTHONHASHSEED" not in failing({**GOOD, "hash_randomization": 1, "env": {**GOOD["env"], "PYTHONHASHSEED": "123"}})
    for bad in ("", "random", "-1", "4294967296", None):
        env = {k: v for k, v in GOOD["env"].items() if k != "PYTHONHASHSEED"}
        if bad is not None:
            env["PYTHONHASHSEED"] = bad
        assert "PYTHONHASHSEED" in failing({**GOOD, "hash_randomization": 1, "env": env}), bad
    assert "CUBLAS_WORKSPACE_CONFIG" in failing({**GOOD, "env": {**GOOD["env"], "CUBLAS_WORKSPACE_CONFIG": None}})
    assert "NCCL_ALGO" in failing({**GOOD, "env": {**GOOD["env"], "NCCL_ALGO": None}})
    assert "NCCL_ALGO" not in failing({**GOOD, "env": {**GOOD["env"], "NCCL_ALGO": None}}, gpus=1)
    assert "deterministic algorithms" in failing({**GOOD, "deterministic_algorithms": False})
    assert "cuDNN" in failing({**GOOD, "cudnn_benchmark": True})
    assert "allow_tf32 = False" in failing({**GOOD, "tf32_cudnn": True})["TF32"]
    assert "TF32" not in failing({**GOOD, "tf32_cudnn": True, "cuda_available": False, "env": {**GOOD["env"]}})
    assert "math SDPA" in failing({**GOOD, "sdpa": {**GOOD["sdpa"], "flash": True}})["SDPA backends"]
    assert "ray_runtime_env" in failing({**GOOD, "torch_initial_seed": 99})["seeds"]
    assert "seeds" in failing({**GOOD, "numpy_mt0": 1})


@pytest.mark.slow
@pytest.mark.ray
def test_real_probe_reaches_the_ray_worker_and_catches_an_unseeded_one(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", extra='[env]\nPYTHONHASHSEED = "0"\nDETAUDIT_SKIP_SEED = "1"\n')
    rows = run_doctor(load_card(card), seed=11, ray=True)
    bad = [(r.process, r.check) for r in rows if not r.ok]
    # The worker got the flags but, like the real case's actor, no seed.
    assert bad == [("Ray worker (ray_runtime_env)", "seeds")], rows
    processes = {r.process for r in rows}
    assert processes == {"run process at start", "driver after enable()", "Ray worker (ray_runtime_env)"}


@pytest.mark.slow
def test_cli_doctor_and_record_preflight(tmp_path: Path) -> None:
    bare = write_card(tmp_path / "bare.toml", name="bare")
    result = run_cli("doctor", str(bare), "--no-ray")
    assert result.code == 1 and "PYTHONHASHSEED" in result.out and "add PYTHONHASHSEED" in result.out
    fixed = write_card(tmp_path / "fixed.toml", name="fixed", extra='[env]\nPYTHONHASHSEED = "0"\n')
    ok = run_cli("doctor", str(fixed), "--no-ray", "--json")
    assert ok.code == 0 and all(r["ok"] for r in json.loads(ok.out))
    recorded = run_cli("record", str(bare), "--runs", "2")
    assert recorded.code == 0 and "doctor:" in recorded.err and "PYTHONHASHSEED" in recorded.err
    assert "doctor:" not in run_cli("record", str(fixed), "--runs", "2", "--no-doctor").err
