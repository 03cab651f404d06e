"""The compile cache a standard ships: run 1's torch.compile artifacts (``detaudit.env.compile_cache``),
in ``<standard stem>.compile/`` next to the standard, so that ``verify`` on a fresh machine
loads kernels instead of compiling them.

``record`` gives each run a folder to save its processes' artifacts in (:func:`record_hook`) and,
once the standard is written, copies run 1's next to it (:func:`ship`), replacing the old ones,
or removing them when run 1 compiled nothing. ``verify`` points its run at the shipped folder
(:func:`verify_hook`); each process loads only artifacts made by its own torch, CUDA, Triton and
device. The standard is compared bit for bit either way: the cache decides speed, never bits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detaudit.env.compile_cache import CACHE_ENV, CACHE_OUT_ENV
from detaudit.fileio import replace_folder, umask

RUN_SUBDIR = "compile-cache"  # runN/compile-cache/: where a recorded run's processes save theirs
SHIPPED = (".bin", ".json")


def standard_cache_dir(standard_path: Path) -> Path:
    """``x.h100-1gpu.json`` -> ``x.h100-1gpu.compile/``."""
    return standard_path.with_name(standard_path.stem + ".compile")


def run_cache_dir(run_workdir: Path) -> Path:
    return Path(run_workdir) / RUN_SUBDIR


def record_hook() -> Callable[[Any], dict[str, str]]:
    """An ``env_hooks`` entry: each recorded run saves its compile artifacts in ``runN/compile-cache/``
    and loads none (a record builds its kernels from scratch)."""
    return lambda spec: {CACHE_OUT_ENV: str(run_cache_dir(spec.workdir)), CACHE_ENV: ""}


def verify_hook(standard_path: Path) -> Callable[[Any], dict[str, str]] | None:
    """An ``env_hooks`` entry pointing the run at the standard's shipped artifacts; None when it
    ships none (the run compiles from scratch)."""
    folder = standard_cache_dir(standard_path)
    if not folder.is_dir() or folder.is_symlink():
        return None
    resolved = str(folder.resolve())
    return lambda spec: {CACHE_ENV: resolved}


def shipped_files(folder: Path) -> list[Path]:
    """The artifact and manifest files in a compile-cache folder, in name order."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in SHIPPED and p.is_file() and not p.name.startswith("."))


def ship(run_workdir: Path, standard_path: Path) -> Path | None:
    """Copy a run's compile artifacts next to the standard (a new folder, renamed into place
    over the old one); with none, remove the old folder: it belongs to another standard.
    Returns the folder, or None when nothing is shipped. A symbolic link in the way is left
    alone (record refuses it before running)."""
    destination = standard_cache_dir(standard_path)
    files = shipped_files(run_cache_dir(run_workdir))
    if destination.is_symlink():
        return None
    staged: Path | None = None
    if files:
        staged = Path(tempfile.mkdtemp(prefix=f".{destination.name}.new.", dir=destination.parent))
        for path in files:
            shutil.copyfile(path, staged / path.name)
        os.chmod(staged, 0o777 & ~umask())
    try:
        replace_folder(staged, destination)
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return destination if files else None
