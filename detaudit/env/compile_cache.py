"""Inside a run's processes: torch.compile's portable cache artifacts, loaded before compiling
and saved after, so that a verify on a fresh machine does not pay the compile a record paid.

``detaudit record`` gives every run ``DETAUDIT_COMPILE_CACHE_OUT`` (a folder): a process that
compiled calls :func:`save` with a name of its own (``rollout_engine0``, ``train0``) and writes
``<name>.bin`` (``torch.compiler.save_cache_artifacts``: Inductor's FX graphs, AOTAutograd
entries, Triton kernels, autotune results) and ``<name>.json`` (what made them: torch, CUDA,
Triton, the device). ``record`` ships run 1's next to the standard; ``detaudit verify`` gives its
run ``DETAUDIT_COMPILE_CACHE`` (that folder), and :func:`load` puts a process's artifacts into
the local caches before it compiles.

Never trusted: artifacts made by another torch, CUDA, Triton or device are not loaded (the
process compiles from scratch, and says why on stderr); artifacts that are loaded only fill
caches whose keys are the graphs themselves, so a changed graph misses and compiles. The
standard is checked bit for bit either way: the cache only decides how long the compile takes.

Imports torch only when called; a pipeline calls :func:`load` and :func:`save` itself (the
reference recipe: ``recipes/diffusion_nft/models.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

CACHE_ENV = "DETAUDIT_COMPILE_CACHE"          # a folder of artifacts to load (verify)
CACHE_OUT_ENV = "DETAUDIT_COMPILE_CACHE_OUT"  # a folder to save artifacts to (record)
MANIFEST_KEYS = ("torch", "cuda", "triton", "device")
MAX_ARTIFACT_BYTES = 1 << 30

_written: dict[str, str] = {}  # name -> digest of the bytes last saved


def _note(message: str) -> None:
    print(f"[detaudit] compile cache: {message}", file=sys.stderr, flush=True)


def build_identity(device: Any = None) -> dict[str, str]:
    """What a process's compiled artifacts depend on beyond the graphs: torch, CUDA, Triton and
    the device (its name; ``cpu`` off the GPU)."""
    import torch

    try:
        import triton  # type: ignore[import-not-found]

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = ""
    name = "cpu"
    if device is not None and getattr(device, "type", str(device)) == "cuda":
        name = torch.cuda.get_device_name(device)
    return {"torch": torch.__version__, "cuda": str(torch.version.cuda or ""), "triton": triton_version,
            "device": name}


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"a compile-cache name is letters, digits, - and _: {name!r}")


def load(name: str, device: Any = None) -> str:
    """Load this process's artifacts (``<$DETAUDIT_COMPILE_CACHE>/<name>.bin``) into the local
    compile caches when they were made by this torch, CUDA, Triton and device; returns what
    happened, in words (also on stderr). Does nothing without the variable."""
    _check_name(name)
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return "off"
    artifacts, manifest_path = Path(folder) / f"{name}.bin", Path(folder) / f"{name}.json"
    if not artifacts.is_file() or not manifest_path.is_file():
        _note(f"{name}: none shipped in {folder}; compiling from scratch")
        return "missing"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        recorded = {key: str(manifest.get(key, "")) for key in MANIFEST_KEYS}
    except (OSError, ValueError, AttributeError) as exc:
        _note(f"{name}: unreadable manifest {manifest_path} ({exc}); compiling from scratch")
        return "unreadable"
    here = build_identity(device)
    if recorded != here:
        differ = ", ".join(f"{k} {recorded[k] or '-'} there, {here[k] or '-'} here" for k in MANIFEST_KEYS
                           if recorded[k] != here[k])
        _note(f"{name}: made elsewhere ({differ}); not loaded, compiling from scratch")
        return "other-build"
    if artifacts.stat().st_size > MAX_ARTIFACT_BYTES:
        _note(f"{name}: {artifacts} is larger than {MAX_ARTIFACT_BYTES >> 20} MiB; not loaded")
        return "too-large"
    data = artifacts.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if manifest.get("sha256") != digest:
        _note(f"{name}: {artifacts} does not match its manifest's sha256; not loaded")
        return "corrupt"
    import torch

    try:
        info = torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # noqa: BLE001 - a cache that cannot load only costs the compile
        _note(f"{name}: torch could not load {artifacts} ({type(exc).__name__}: {exc}); compiling from scratch")
        return "unreadable"
    if info is None:
        _note(f"{name}: torch could not read {artifacts}; compiling from scratch")
        return "unreadable"
    _written[name] = digest  # the same artifacts saved again need no second write
    _note(f"{name}: loaded {_count(info)} artifacts from {artifacts}")
    return "loaded"


def save(name: str, device: Any = None) -> Path | None:
    """Write every artifact this process's compiles made or used so far to
    ``<$DETAUDIT_COMPILE_CACHE_OUT>/<name>.bin`` with its manifest (atomically; nothing when
    unchanged since the last call, nothing was compiled, or the variable is not set)."""
    _check_name(name)
    folder = os.environ.get(CACHE_OUT_ENV)
    if not folder:
        return None
    import torch

    try:
        saved = torch.compiler.save_cache_artifacts()
    except Exception as exc:  # noqa: BLE001 - the run goes on; a verify then compiles from scratch
        _note(f"{name}: torch could not save its compile artifacts ({type(exc).__name__}: {exc})")
        return None
    if saved is None:
        return None
    data, info = saved
    digest = hashlib.sha256(data).hexdigest()
    out = Path(folder) / f"{name}.bin"
    if _written.get(name) == digest and out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = {**build_identity(device), "name": name, "sha256": digest, "bytes": len(data),
                "artifacts": _count(info)}
    try:
        for path, content in ((out, data), (out.with_suffix(".json"),
                                            (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(content)
            os.replace(tmp, path)
    except OSError as exc:
        _note(f"{name}: cannot write {out} ({exc.strerror or exc})")
        return None
    _written[name] = digest
    return out


def _count(info: Any) -> int:
    """How many artifacts a ``CacheInfo`` lists (keys per kind of artifact)."""
    kinds = getattr(info, "artifacts", None)
    return sum(len(keys) for keys in kinds.values()) if isinstance(kinds, dict) else 0
