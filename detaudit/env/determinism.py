"""Make a training process, and every Ray worker process it starts, deterministic.

The failure this prevents: a pipeline seeds torch in its train actor only, while another
actor (a rollout manager, a data-conversion worker) draws from its own, never seeded,
process-global RNG. ``enable(seed)`` treats one process; ``ray_runtime_env(seed)`` gives
``ray.init`` a runtime env whose worker setup hook runs ``enable`` in *every* worker
process before any task or actor code::

    import ray
    from detaudit import determinism

    determinism.enable(seed)                       # the driver
    ray.init(runtime_env=determinism.ray_runtime_env(seed))

Set CUDA-related variables before CUDA initialises: ``ray_runtime_env`` passes them as
environment variables, so actors get them at process start.

Nothing here imports torch, numpy or ray at module import; ``enable`` imports what is
installed.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

SEED_ENV = "DETAUDIT_SEED"
DETERMINISTIC_ENV = "DETAUDIT_DETERMINISTIC"
SKIP_SEED_ENV = "DETAUDIT_SKIP_SEED"  # set on one actor to reproduce an unseeded process
ATTENTION_ENV = "DETAUDIT_ATTENTION"  # the SDPA backend choice, for every worker process

# SDPA backends per attention mode. "math": PyTorch's reference kernel, deterministic forward
# and backward, slow. "flash": the fused flash kernel wherever it applies (under
# use_deterministic_algorithms PyTorch runs its deterministic backward), math for inputs flash
# cannot take (an attention mask, as in CLIP's text encoder; float32): which of the two runs
# is a fixed function of the inputs' shapes and dtypes. "any": every backend, PyTorch picks.
ATTENTION_BACKENDS = {
    "math": ("math",),
    "flash": ("flash", "math"),
    "any": ("flash", "mem_efficient", "cudnn", "math"),
}

# cuBLAS needs a fixed workspace config for deterministic GEMMs (see the CUDA docs on
# results reproducibility); PYTHONHASHSEED fixes set/dict-of-str iteration order.
DETERMINISTIC_ENV_VARS = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "PYTHONHASHSEED": "0",
}


def seed_python_and_numpy(seed: int) -> None:
    """Seed Python's random and numpy's legacy RNG: the part of ``seed_everything`` that needs
    no torch import. A driver calls it before ``ray.init``, which draws from ``random``, and
    seeds the rest while its workers start."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass


def seed_everything(seed: int) -> None:
    """Seed the process-global RNGs: Python's random, numpy's legacy RNG, torch (CPU+CUDA)."""
    seed_python_and_numpy(seed)
    try:
        import torch

        torch.manual_seed(seed)  # also seeds every CUDA device lazily
    except ImportError:
        pass


def set_deterministic_flags(attention: str = "math", fill_uninitialized_memory: bool = True) -> None:
    """cuDNN and torch deterministic-algorithm switches, and the SDPA backends of ``attention``.

    ``attention`` is a key of ``ATTENTION_BACKENDS``; the switches are set both ways, so a
    later call (an actor after its worker hook) gets exactly the backends it names.
    ``fill_uninitialized_memory=False`` stops deterministic mode from filling every new
    ``torch.empty`` with NaN (one extra kernel per allocation: ~1,500 per SD3.5 train
    micro-step on a GPU). Safe only where no kernel reads memory it did not write; a run that
    does would differ between runs, which ``detaudit record`` then shows.
    """
    if attention not in ATTENTION_BACKENDS:
        raise ValueError(f"attention must be one of {sorted(ATTENTION_BACKENDS)}, not {attention!r}")
    for key, value in DETERMINISTIC_ENV_VARS.items():
        os.environ.setdefault(key, value)
    try:
        import torch
    except ImportError:
        return
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # TF32 rounds fp32 matmul/conv inputs to 10 mantissa bits on Ampere and later: off, so a
    # standard recorded in fp32 means fp32 (``detaudit doctor`` checks it).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    use_deterministic_algorithms()
    torch.utils.deterministic.fill_uninitialized_memory = fill_uninitialized_memory  # type: ignore[attr-defined]
    set_attention_backends(attention)


def use_deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without importing Inductor.

    torch's function also sets Inductor's ``deterministic`` and imports Inductor to do it: ~1.5 s
    of CPU in every process that never compiles (a driver, a rollout manager, each seeded Ray
    worker). Inductor reads ``TORCHINDUCTOR_DETERMINISTIC`` when it is first imported, so this
    sets that variable, sets the flag where Inductor is already imported, and switches torch's
    own kernels as torch does.
    """
    import torch

    set_switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_switch is None:  # not in this torch: its public function, import included
        torch.use_deterministic_algorithms(True, warn_only=False)
        return
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        inductor_config.deterministic = True  # type: ignore[attr-defined]
    set_switch(True, warn_only=False)


def set_attention_backends(attention: str) -> None:
    """Enable exactly the SDPA backends of ``attention`` (process-wide switches)."""
    import torch

    cuda = getattr(torch.backends, "cuda", None)
    if cuda is None:
        return
    wanted = ATTENTION_BACKENDS[attention]
    for backend in ("flash", "mem_efficient", "cudnn", "math"):
        switch = getattr(cuda, f"enable_{backend}_sdp", None)
        if switch is not None:
            switch(backend in wanted)


def enabled_attention_backends() -> list[str]:
    """The SDPA backends this process has switched on, in PyTorch's order of preference."""
    import torch

    cuda = torch.backends.cuda
    return [b for b in ("flash", "mem_efficient", "cudnn", "math") if getattr(cuda, f"{b}_sdp_enabled")()]


def enable(seed: int, *, deterministic: bool = True, seed_rngs: bool = True, attention: str = "math",
           fill_uninitialized_memory: bool = True) -> None:
    """Seed this process's global RNGs and switch torch to deterministic kernels."""
    if deterministic:
        set_deterministic_flags(attention, fill_uninitialized_memory)
    if seed_rngs:
        seed_everything(seed)


def ray_worker_setup() -> None:
    """Ray ``worker_process_setup_hook``: runs in every worker process before user code.

    Reads the seed from ``DETAUDIT_SEED``. An actor started with ``DETAUDIT_SKIP_SEED=1``
    gets the deterministic flags but unseeded RNGs (to reproduce the classic bug).
    """
    seed = os.environ.get(SEED_ENV)
    deterministic = os.environ.get(DETERMINISTIC_ENV, "1") == "1"
    skip = os.environ.get(SKIP_SEED_ENV) == "1"
    if seed is None:
        return
    enable(int(seed), deterministic=deterministic, seed_rngs=not skip,
           attention=os.environ.get(ATTENTION_ENV, "math"))


def ray_runtime_env(seed: int, *, deterministic: bool = True, env_vars: dict[str, str] | None = None,
                    base: dict[str, Any] | None = None, attention: str = "math") -> dict[str, Any]:
    """A runtime env for ``ray.init`` that runs ``ray_worker_setup`` in every worker process
    (with the SDPA backends of ``attention``)."""
    if attention not in ATTENTION_BACKENDS:
        raise ValueError(f"attention must be one of {sorted(ATTENTION_BACKENDS)}, not {attention!r}")
    runtime_env = dict(base or {})
    variables = dict(runtime_env.get("env_vars", {}))
    if deterministic:
        variables.update(DETERMINISTIC_ENV_VARS)
    variables.update({SEED_ENV: str(seed), DETERMINISTIC_ENV: "1" if deterministic else "0",
                      ATTENTION_ENV: attention})
    variables.update(env_vars or {})
    runtime_env["env_vars"] = variables
    runtime_env["worker_process_setup_hook"] = "detaudit.env.determinism.ray_worker_setup"
    return runtime_env
