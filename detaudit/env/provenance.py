"""Where a run happened: runner class, CPU, threads, GPU, driver, CUDA, torch build, packages, git.

Bitwise agreement is promised only on one *runner class*. On GPU the class is the GPU model
and the count a run uses. On CPU it is the vendor, family and model and the instruction set
torch dispatches to: the tiny recipe's bits differ between an AMD EPYC Zen 4 and an Intel
Xeon with the same torch and the same AVX-512 capability (docs/standards-across-machines.md).
Detection runs ``envprobe.py`` in the recipe's interpreter and environment, so detaudit
itself never imports torch, and a card's ``env`` (e.g. ``ATEN_CPU_CAPABILITY``) is seen.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit.errors import InputError
from detaudit.fileio import user_cache_dir
from detaudit.runner_class import RunnerClass

if TYPE_CHECKING:  # annotations only: `record --metrics` and a failed `verify --metrics` read no card (~10 ms)
    from detaudit.data.card import Card

PROBE_SCRIPT = Path(__file__).parent / "probes" / "envprobe.py"
# Where the probe keeps what importing torch told it (probes/probe_cache.py); "off" keeps nothing.
PROBE_CACHE_ENV = "DETAUDIT_PROBE_CACHE"

# What a standard's ``runner`` section keeps of the probe, in this order of importance.
RUNNER_KEYS = (
    "gpu", "driver", "cuda", "cudnn", "nccl", "torch", "torch_config", "python", "machine", "platform",
    "cpu", "cpu_capability", "threads", "packages",
)
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon", "CentaurHauls": "centaur"}


def probe_cache_dir() -> Path | None:
    """``$DETAUDIT_PROBE_CACHE``, else ``$XDG_CACHE_HOME/detaudit/envprobe`` (``~/.cache`` when
    unset); None when the variable says ``off`` (or is empty)."""
    chosen = os.environ.get(PROBE_CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "no") else Path(chosen).expanduser()
    return user_cache_dir() / "envprobe"


def detect_environment(python: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Versions and hardware as the recipe's interpreter sees them, in the run's environment.

    What importing a CPU build of torch tells is cached per torch build, machine and environment
    (:func:`probe_cache_dir`; probes/probe_cache.py says what the key holds).
    Fails closed: when the probe cannot run, nothing can be said about the runner class, so
    this raises ``InputError`` with the probe's last error line instead of guessing.
    """
    python = python or sys.executable
    cache = probe_cache_dir()
    try:
        proc = subprocess.run(
            [python, str(PROBE_SCRIPT), *(["--cache", str(cache)] if cache else [])],
            capture_output=True, text=True, timeout=180, env=env,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(python, f"cannot probe the run's environment: {exc}") from None
    lines = proc.stdout.strip().splitlines()
    try:
        if proc.returncode != 0 or not lines:
            raise ValueError
        info = json.loads(lines[-1])
        if not isinstance(info, dict):
            raise ValueError
    except ValueError:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise InputError(python, f"cannot probe the run's environment: {why}") from None
    return info


def gpu_short_name(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA A100-SXM4-80GB' -> 'a100'."""
    words = [w for w in re.split(r"[\s_]+", name) if w and w.upper() not in ("NVIDIA", "TESLA", "GEFORCE")]
    head = words[0] if words else name
    return head.split("-")[0].lower()


def cpu_model_tag(cpu: dict[str, Any]) -> str:
    """'intel-6.207' (vendor, family.model): the part of the CPU class that names the chip."""
    vendor = str(cpu.get("vendor") or "unknown")
    vendor = _VENDORS.get(vendor, re.sub(r"[^a-z0-9]+", "", vendor.lower()) or "unknown")
    model = ".".join(str(cpu[k]) for k in ("family", "model") if cpu.get(k) not in (None, ""))
    model = re.sub(r"[^a-z0-9.]+", "", model.lower())
    return f"{vendor}-{model}" if model else vendor


def runner_class(info: dict[str, Any], gpus_per_run: int) -> RunnerClass:
    """The class a standard is bound to: h200-1gpu or cpu-intel-6.207-avx512.

    CPU: vendor and family.model, torch's CPU capability, and 'amx' where the CPU shows AMX
    tiles (oneDNN then runs bf16/int8 matmuls on other units).
    """
    if gpus_per_run > 0 and info.get("gpu"):
        return RunnerClass.of([gpu_short_name(info["gpu"]["name"]), f"{gpus_per_run}gpu"], None, "detected runner class")
    if gpus_per_run > 0:
        return RunnerClass.of(["nogpu", f"{gpus_per_run}gpu"])
    cpu = info.get("cpu") or {}
    cls = ["cpu", cpu_model_tag(cpu), str(info.get("cpu_capability", "unknown")).lower()]
    if "amx_tile" in (cpu.get("flags") or []):
        cls.append("amx")
    return RunnerClass.of(cls, None, "detected runner class")


def card_runner_class(card: Card, info: dict[str, Any]) -> RunnerClass:
    """The class a run of ``card`` is bound to: the card's own ``runner``, else its portable
    profile's class, else the one ``info`` (the probe, taken with the card's environment) shows."""
    if card.runner is not None:
        return card.runner
    if card.portable is not None:
        return card.portable.runner_class
    return runner_class(info, card.gpus_per_run)


def standard_runner(cls: RunnerClass, info: dict[str, Any]) -> dict[str, Any]:
    """The ``runner`` section of a standard: the class and every probe field that is known."""
    runner: dict[str, Any] = {"class": cls.to_json()}
    for key in RUNNER_KEYS:
        if info.get(key) is not None:
            runner[key] = info[key]
    return runner


def git_state(path: str | Path) -> dict[str, Any]:
    """Commit and dirty flag of the repository holding ``path`` (None outside a repo)."""
    cwd = Path(path).resolve()
    cwd = cwd if cwd.is_dir() else cwd.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=20, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key in sorted(value):
            flat.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _show(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    return repr(value)


def provenance_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Lines naming every field of a standard's environment that differs here (packages apart).

    Only fields the standard records are compared: a standard written by an older detaudit
    that kept fewer fields cannot say more, and a line says so.
    """
    old = _flatten({k: v for k, v in recorded.items() if k not in ("class", "packages")})
    new = _flatten({k: v for k, v in current.items() if k not in ("class", "packages")})
    lines = [
        f"{key}: standard {_show(old[key])}, here {_show(new.get(key))}"
        for key in old
        if old[key] != new.get(key)
    ]
    lines += [
        f"{key}: standard absent, here {_show(new[key])}"
        for key in new
        if key not in old and key.split(".")[0] in recorded
    ]
    missing = [k for k in RUNNER_KEYS if k not in recorded and current.get(k) is not None and k != "packages"]
    if missing:
        lines.append(f"not recorded in the standard (cannot compare): {', '.join(missing)}")
    return lines


def package_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'name: standard 1.0, here 1.1' for each distribution whose version differs or is absent."""
    old = recorded.get("packages")
    new = current.get("packages") or {}
    if not isinstance(old, dict):
        return []
    return [
        f"{name}: standard {old.get(name) or 'absent'}, here {new.get(name) or 'absent'}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


# Distributions whose version can change a run's bits on their own: torch and its compiler, the
# CUDA / cuDNN / NCCL / cuBLAS wheels, numpy and the math libraries torch or numpy link. The card's
# own imports join them (``bit_packages``).
BIT_PACKAGES = (
    "torch", "torchvision", "torchaudio", "triton", "pytorch-triton*", "nvidia-*", "cuda-*", "numpy", "scipy",
    "mkl", "mkl-*", "intel-openmp", "onednn*", "openblas*", "scipy-openblas*", "jax", "jaxlib", "flash-attn",
    "xformers", "apex", "transformer-engine*", "deepspeed", "megatron-core",
)


def normalised(name: str) -> str:
    """A distribution or module name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def bit_packages(lines: list[str], imports: Collection[str] = ()) -> tuple[list[str], list[str]]:
    """``package_differences`` lines split in two: those of packages that can change bits
    (``BIT_PACKAGES``, and ``imports``: the card's own, by module name) first, and the rest."""
    own = {normalised(name) for name in imports}
    first, rest = [], []
    for line in lines:
        name = line.split(":", 1)[0]
        if name in own or any(fnmatch.fnmatchcase(name, pattern) for pattern in BIT_PACKAGES):
            first.append(line)
        else:
            rest.append(line)
    return first, rest
