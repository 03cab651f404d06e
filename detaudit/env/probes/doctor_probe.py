"""Runs inside the processes ``detaudit doctor`` checks; prints one JSON line of facts per process.

``python -m detaudit.env.probes.doctor_probe SEED [--ray]``, started with the card's environment:

1. ``start``: the process as the card's environment starts it (variables that only work when
   set before the interpreter or CUDA starts: PYTHONHASHSEED, CUBLAS_WORKSPACE_CONFIG, NCCL_ALGO);
2. ``driver``: the same process after ``determinism.enable(SEED)``, the documented driver step;
3. ``ray worker``: a Ray worker started through ``determinism.ray_runtime_env(SEED)`` (with ``--ray``),
   in a Ray instance the probe starts for itself (``address="local"``).

Imports torch, numpy and ray only when installed; never the detaudit CLI.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ENV_KEYS = ("CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "PYTHONHASHSEED", "DETAUDIT_SEED")


def facts() -> dict[str, Any]:
    """This process's determinism settings, as plain JSON values."""
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "hash_randomization": sys.flags.hash_randomization,
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
    }
    try:
        import torch
    except ImportError:
        out["torch"] = None
        return out
    cuda = torch.backends.cuda
    out["torch"] = torch.__version__
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["deterministic_algorithms"] = bool(torch.are_deterministic_algorithms_enabled())
    out["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    out["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    out["tf32_matmul"] = bool(cuda.matmul.allow_tf32)
    out["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    out["sdpa"] = {
        name: bool(getattr(cuda, f"{name}_sdp_enabled")())
        for name in ("flash", "mem_efficient", "cudnn", "math")
        if hasattr(cuda, f"{name}_sdp_enabled")
    }
    out["torch_initial_seed"] = int(torch.initial_seed())
    try:
        import numpy as np

        state = np.random.get_state()
        # MT19937 key[0] is the seed after np.random.seed. The legacy tuple form is MT19937's; a dict means
        # np.random.set_bit_generator replaced it, and there is no such key.
        out["numpy_mt0"] = int(state[1][0]) if isinstance(state, tuple) else None
    except ImportError:
        out["numpy_mt0"] = None
    return out


def _ray_worker_facts(seed: int) -> dict[str, Any]:
    import ray

    from detaudit.env.determinism import ray_runtime_env

    # Its own Ray, always: never whatever cluster RAY_ADDRESS or a `ray start` on this machine names
    # (joining one with num_cpus fails; joining one at all would probe someone else's workers).
    ray.init(address="local", runtime_env=ray_runtime_env(seed), num_cpus=1, include_dashboard=False,
             log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=0)(facts)
        return ray.get(remote.remote(), timeout=300)
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    seed = int(argv[0])
    report: dict[str, Any] = {"start": facts()}
    from detaudit.env.determinism import enable

    enable(seed)
    report["driver"] = facts()
    if "--ray" in argv:
        try:
            import ray  # noqa: F401
        except ImportError:
            report["ray worker"] = {"error": "ray is not installed here"}
        else:
            report["ray worker"] = _ray_worker_facts(seed)
    print("DETAUDIT_DOCTOR " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
