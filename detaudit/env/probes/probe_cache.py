"""The environment probe's cache: what importing torch told the probe, kept per torch build,
machine and environment, so that a CLI call need not import torch again (~2 s of CPU each).

Imported by ``envprobe.py`` as a script neighbour (standard library only; never imports
detaudit). Only a CPU build of torch is cached: what a CUDA/ROCm/XPU build reports depends on the
devices and driver of the moment, so it is always probed. The key holds everything the torch
part can depend on; anything not known to be harmless is in it, so an unknown change re-probes:

- the interpreter (``sys.executable``, its version, ``sys.path``; the working directory when a
  ``sys.path`` entry is relative) and every installed distribution's version;
- torch's files (the path it imports from, and size and mtime of ``version.py``, ``__init__.py``,
  the ``_C`` extension and every file in ``torch/lib``): a reinstall of the same version re-probes;
- the CPU (the first processor's /proc/cpuinfo block but its clock, the CPU count, this process's
  affinity): the dispatched instruction set and the default thread counts follow them;
- the whole environment but for names that cannot reach torch (:data:`VOLATILE`).

A cache file that cannot be read, or does not hold what the probe writes, is ignored and written
again; a cache that cannot be written is left alone (the probe's answer is the same).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable

FORMAT = 1
# Variables that change from call to call and that no torch import reads.
VOLATILE = frozenset({
    "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
    "COLUMNS", "LINES", "PWD", "OLDPWD", "SHLVL", "_", "DETAUDIT_PROBE_CACHE",
})
# What torch's build file says about devices: a build naming one is never cached.
DEVICE_BUILDS = ("cuda", "hip", "rocm", "xpu")


def torch_build(torch_dir: str) -> dict | None:
    """The constants of ``torch/version.py``, read without importing torch (None: unreadable)."""
    try:
        with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict = {}
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    return found


def _files(torch_dir: str) -> list[list[object]]:
    paths = [os.path.join(torch_dir, name) for name in ("version.py", "__init__.py")]
    for folder, prefix in ((torch_dir, "_C"), (os.path.join(torch_dir, "lib"), "")):
        try:
            paths += [entry.path for entry in os.scandir(folder) if entry.name.startswith(prefix) and entry.is_file()]
        except OSError:
            pass
    stats: list[list[object]] = []
    for path in sorted(paths):
        try:
            st = os.stat(path)
        except OSError:
            stats.append([path, None])
        else:
            stats.append([path, st.st_size, st.st_mtime_ns, st.st_ino])
    return stats


def _cpuinfo_block() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return []
    lines: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            if lines:
                break
            continue
        if line.partition(":")[0].strip() != "cpu MHz":  # the clock moves from one read to the next
            lines.append(line)
    return lines


def cache_key(cheap: dict, torch_dir: str) -> str:
    """A digest of everything the torch part of the probe can depend on (see the module's doc)."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    relative = any(not os.path.isabs(p) for p in sys.path)
    facts = {
        "format": FORMAT,
        "executable": sys.executable, "version": sys.version, "path": sys.path,
        "cwd": os.getcwd() if relative else None,
        "cheap": cheap, "torch_dir": torch_dir, "files": _files(torch_dir),
        "cpuinfo": _cpuinfo_block(), "cpu_count": os.cpu_count(), "affinity": affinity,
        "env": sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("torch_part"), dict)
            and isinstance(doc["torch_part"].get("torch"), str)):
        return None
    return doc["torch_part"]


def _write(path: str, torch_part: dict) -> None:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"format": FORMAT, "torch_part": torch_part}, fh, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next call a probe


def torch_part_of(cheap: dict, torch_dir: str | None, cache_dir: str,
                  probe_torch: Callable[[], dict]) -> tuple[dict, str]:
    """The torch part of the probe and where it came from ("probed", "cached" or "not cached: WHY")."""
    if torch_dir is None:  # no torch to import: nothing to keep
        return probe_torch(), "probed"
    build = torch_build(torch_dir)
    if build is None or any(build.get(name) for name in DEVICE_BUILDS):
        return probe_torch(), "not cached: a device build of torch (or its version.py unreadable)"
    path = os.path.join(cache_dir, cache_key(cheap, torch_dir) + ".json")
    found = _read(path)
    if found is not None:
        return found, "cached"
    part = probe_torch()
    if isinstance(part.get("torch"), str):  # torch imported (a failed import is probed again)
        _write(path, part)
    return part, "probed"
