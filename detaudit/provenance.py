"""Where a run happened: runner class, GPU, driver, CUDA, torch, Python, git state.

Bitwise agreement is promised only on one *runner class*: kernels differ by GPU model and
count, and on CPU by the instruction set torch dispatches to (AVX512 vs AVX2). Detection
runs in a subprocess of the recipe's interpreter, so detaudit itself never imports torch.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

_PROBE = r"""
import json, platform, sys
info = {"python": platform.python_version(), "machine": platform.machine()}
try:
    import torch
except Exception:
    torch = None
if torch is not None:
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:
        pass
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        info["gpu"] = {"name": torch.cuda.get_device_name(0), "count": n}
print(json.dumps(info))
"""


def _cpu_flags_capability() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine().lower() or "unknown"
    flags = set(re.findall(r"\b(avx512f|avx2)\b", text))
    if "avx512f" in flags:
        return "AVX512"
    if "avx2" in flags:
        return "AVX2"
    return "DEFAULT"


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def detect_environment(python: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Versions and hardware as the recipe's interpreter sees them (torch optional)."""
    python = python or sys.executable
    info: dict[str, Any] = {}
    try:
        out = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True, env=env
        ).stdout
        info = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        info = {"python": platform.python_version(), "machine": platform.machine()}
    info.setdefault("cpu_capability", _cpu_flags_capability())
    if "gpu" in info:
        info["driver"] = _nvidia_driver()
    return info


def gpu_short_name(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA A100-SXM4-80GB' -> 'a100'."""
    words = [w for w in re.split(r"[\s_]+", name) if w and w.upper() not in ("NVIDIA", "TESLA", "GEFORCE")]
    head = words[0] if words else name
    return head.split("-")[0].lower()


def runner_class(info: dict[str, Any], gpus_per_run: int) -> list[str]:
    """The class a standard is bound to: ['h200', '1gpu'] or ['cpu', 'avx512']."""
    if gpus_per_run > 0 and info.get("gpu"):
        return [gpu_short_name(info["gpu"]["name"]), f"{gpus_per_run}gpu"]
    if gpus_per_run > 0:
        return ["nogpu", f"{gpus_per_run}gpu"]
    return ["cpu", str(info.get("cpu_capability", "unknown")).lower()]


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


PROVENANCE_KEYS = ("gpu", "driver", "cuda", "torch", "python", "cpu_capability")


def provenance_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Lines naming what differs between a standard's environment and this one."""
    lines = []
    for key in PROVENANCE_KEYS:
        if key in recorded and recorded.get(key) != current.get(key):
            lines.append(f"{key}: standard {recorded.get(key)!r}, here {current.get(key)!r}")
    return lines
