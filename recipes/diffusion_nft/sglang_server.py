"""One rollout engine's sglang diffusion server: sglang's own launcher, in the sglang environment.

``python -m recipes.diffusion_nft.sglang_server [sglang server flags]`` runs in a process the
engine actor starts. The server is two kinds of process: this one (FastAPI/uvicorn, which
spawns the workers) and one scheduler worker per GPU (``sglang-diffusionWorker-N``, a fresh
interpreter by multiprocessing's spawn). Each gets what a Ray worker of the run gets from
``detaudit.env.determinism.ray_worker_setup``: under ``--deterministic-mode`` its RNGs seeded
and torch's deterministic flags, from the ``DETAUDIT_*`` variables the actor hands down. sglang
has no hook of its own for that, so the worker's entry point is wrapped: launch_server's module
names the function its spawned workers run, and spawn re-imports a target by its qualified
name, so the name is pointed at ``scheduler_process`` below (as miles_diffusion did with
``run_scheduler_process``).

What sglang's CPU path needs patched is a named shim here, applied only where the bug is
present (``SHIMS``).
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detaudit.env import determinism

# sglang's own switch for its batch-invariant kernels (read by its layernorm, among others).
SGLANG_DETERMINISTIC_ENV = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"


# --- shims: each a (does the bug show here?, fix) pair -------------------------------------

# sglang <= 0.5.17, runtime/pipelines_core/lora_pipeline.py (LoRAPipeline._temporarily_disable_offload,
# run on every LoRA push): ``if torch.get_device_module().is_available(): ...empty_cache()``. On a
# CPU-only torch the device module is ``torch.cpu``, which is "available" and has no ``empty_cache``
# (torch 2.11-2.14), so every push fails with AttributeError. sglang 0.5.23 calls
# ``current_platform.empty_cache()`` there (runtime/pipelines_core/lora/pipeline.py; on CPU a
# ``gc.collect()``): the bug is gone and this shim stays off.
_LORA_OFFLOAD_MODULE = "sglang.multimodal_gen.runtime.pipelines_core.lora_pipeline"
_CPU_EMPTY_CACHE_CALL = "get_device_module().empty_cache()"


def has_cpu_empty_cache_bug(lora_source: str | None, cpu_has_empty_cache: bool) -> bool:
    """The LoRA push's offload context calls ``empty_cache`` on a device module that has none."""
    return lora_source is not None and _CPU_EMPTY_CACHE_CALL in lora_source and not cpu_has_empty_cache


def _installed_source(module: str) -> str | None:
    """The text of an installed module, without importing it (None: not there)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(encoding="utf-8")


def cpu_empty_cache_bug_present() -> bool:
    import torch

    return has_cpu_empty_cache_bug(_installed_source(_LORA_OFFLOAD_MODULE), hasattr(torch.cpu, "empty_cache"))


def cpu_empty_cache_shim() -> None:
    """CPU tensors have no caching allocator: there is nothing to hand back, so a no-op is exact."""
    import torch

    torch.cpu.empty_cache = lambda: None  # type: ignore[attr-defined]


SHIMS: dict[str, tuple[Callable[[], bool], Callable[[], None]]] = {
    "cpu_empty_cache": (cpu_empty_cache_bug_present, cpu_empty_cache_shim),
}


def apply_shims() -> list[str]:
    """Apply each shim whose bug this installation has; their names (logged by the server)."""
    applied = []
    for name, (present, fix) in SHIMS.items():
        if present():
            fix()
            applied.append(name)
    return applied


# --- the processes ----------------------------------------------------------------------------


def prepare_process() -> list[str]:
    """What every process of the server does first: the run's seeding, then the shims."""
    determinism.ray_worker_setup()  # reads DETAUDIT_SEED & co.; nothing without them
    return apply_shims()


def scheduler_process(spec: Any) -> None:
    """A scheduler worker's entry point: the run's seeding, then sglang's own.

    A SIGTERM (the launcher's when the worker does not stop within its deadline) ends the worker
    through Python's exit, not the signal's default: its exit handlers run, detaudit's tracer
    among them, so the worker's trace is whole."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    prepare_process()
    from sglang.multimodal_gen.runtime.managers.worker_bootstrap import bootstrap_scheduler_process

    bootstrap_scheduler_process(spec)


def main(argv: list[str] | None = None) -> None:
    # uvicorn stops serving on SIGTERM, then raises the signal again under the handler it found: the
    # default one would end this process before sglang's `finally` stops its scheduler workers, which
    # their parent-death signal then kills (their traces cut short). Python's exit runs that `finally`.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    applied = prepare_process()
    if applied:
        print(f"[sglang_server] shims applied: {', '.join(applied)}", file=sys.stderr, flush=True)
    from sglang.multimodal_gen.runtime import launch_server
    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks
    from sglang.multimodal_gen.runtime.server_args import prepare_server_args

    launch_server.bootstrap_scheduler_process = scheduler_process  # type: ignore[attr-defined]
    apply_plugin_hooks()
    server_args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    # No kill of the remaining process tree afterwards (sglang's own ``python -m ...launch_server``
    # has one): sglang's launch has stopped its workers by then (asked, then terminated, then
    # killed), and what is left, multiprocessing's resource tracker, ends when this process does; a
    # SIGKILL could cut it off before its trace is written.
    launch_server.dispatch_launch(server_args)


if __name__ == "__mp_main__":
    # A scheduler worker, spawned: multiprocessing re-imports the launcher's main module as
    # __mp_main__ before it unpickles the worker's target, whose imports of sglang already draw from
    # Python's global random (``detaudit trace`` showed one random.getrandbits there, unseeded).
    # Seed here, before them; scheduler_process seeds again (the same state) before sglang's own code.
    prepare_process()

if __name__ == "__main__":
    main()
