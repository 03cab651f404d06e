"""What changes a run's bits, as the recipe's interpreter sees it; prints one JSON object.

Run as a script by ``detaudit.env.provenance`` (``python envprobe.py``) in the recipe's
interpreter and environment, so it imports only the standard library and, if present, torch.
It must not import detaudit: the recipe's interpreter need not have it installed.

Why each field is here (see docs/standards-across-machines.md):
- ``cpu``: vendor, family/model/stepping and the instruction-set flags that kernels dispatch
  on. The tiny recipe gives different bits on an AMD EPYC Zen 4 and on an Intel Xeon with the
  same torch and the same AVX-512 capability, so the vendor and model matter, not only the ISA.
- ``threads``: torch's intra/inter-op thread counts and the variables that set them and that
  steer BLAS/oneDNN dispatch; reduction order can follow the thread count.
- ``torch_config``: which BLAS, MKL and oneDNN versions the torch build carries.
- ``packages``: every distribution installed in the interpreter (the recipe imports a subset).
- ``gpu``: what the run sees (``CUDA_VISIBLE_DEVICES`` applies), with driver, CUDA, cuDNN, NCCL.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys

# Flags that change which kernels run (x86). Others (e.g. 'ht', 'pdpe1gb') never do.
KERNEL_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
)
# Variables that set thread counts or cap the instruction set of a math library.
DISPATCH_ENV = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES",
)


def cpu_info(text: str, machine: str) -> dict:
    """Vendor, model and kernel-relevant flags from the text of /proc/cpuinfo (first CPU)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: all cores of a VM are alike
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    info = {
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer") or machine,
        "model_name": fields.get("model name") or fields.get("Processor") or "",
        "family": fields.get("cpu family") or fields.get("CPU architecture") or "",
        "model": fields.get("model") or fields.get("CPU part") or "",
        "stepping": fields.get("stepping") or fields.get("CPU variant") or "",
        "flags": sorted(f for f in KERNEL_FLAGS if f in flags) if "flags" in fields else sorted(flags),
    }
    return info


def _cpu() -> dict:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    info = cpu_info(text, platform.machine())
    if not info["model_name"]:
        info["model_name"] = platform.processor()
    info["logical_cpus"] = os.cpu_count()
    try:
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["usable_cpus"] = os.cpu_count()
    return info


def _packages() -> dict:
    """Every installed distribution's name (normalised) and version, as ``importlib.metadata`` reads them.

    Only each metadata file's header block is parsed: ``dist.metadata`` parses the whole file,
    long descriptions included (~150 ms for ~120 packages against ~15 ms, on every probe)."""
    from email.parser import HeaderParser
    from importlib import metadata

    parser = HeaderParser()
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        # the files dist.metadata reads, in its order; the headers end at the first empty line
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
        headers = parser.parsestr(re.split(r"\r?\n\r?\n", text, maxsplit=1)[0])
        names = headers.get_all("Name") or []  # the first, as Message.get would give
        name = (names[0] if names and names[0] else "").strip()
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), headers["Version"])
    return dict(sorted(found.items()))


def _torch_config(torch: object) -> dict:
    try:
        text = torch.__config__.show()  # type: ignore[attr-defined]
    except Exception:
        return {}
    config: dict[str, str] = {}
    for pattern, key in (
        (r"BLAS_INFO=([^,\s]+)", "blas"),
        (r"LAPACK_INFO=([^,\s]+)", "lapack"),
        (r"Math Kernel Library Version ([^\n]+?)(?: for |\n)", "mkl"),
        (r"MKL-DNN v([\w.]+)", "onednn"),
        (r"OpenMP (\d+)", "openmp"),
    ):
        match = re.search(pattern, text)
        if match:
            config[key] = match.group(1).strip()
    return config


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def cheap_probe() -> dict:
    """What the probe learns without importing torch."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": {"system": platform.system(), "release": platform.release(), "libc": "-".join(platform.libc_ver())},
        "cpu": _cpu(),
        "threads": {k: os.environ[k] for k in DISPATCH_ENV if k in os.environ},
        "packages": _packages(),
    }


def torch_probe() -> dict:
    """What importing torch tells (empty when torch is not importable); the thread counts under
    ``torch_threads``, merged into ``threads`` by :func:`merge`."""
    try:
        import torch
    except Exception:
        return {}
    part: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_config": _torch_config(torch),
        "torch_threads": {"torch_intra_op": torch.get_num_threads(), "torch_inter_op": torch.get_num_interop_threads()},
    }
    try:
        part["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:
        pass
    if torch.cuda.is_available():
        count = torch.cuda.device_count()  # what this run sees: CUDA_VISIBLE_DEVICES applies
        part["gpu"] = {"name": torch.cuda.get_device_name(0), "count": count}
        part["cudnn"] = torch.backends.cudnn.version()
        try:
            part["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:
            pass
        part["driver"] = _nvidia_driver()
    return part


def merge(cheap: dict, torch_part: dict) -> dict:
    info = {**cheap, "threads": dict(cheap["threads"])}
    for key, value in torch_part.items():
        if key == "torch_threads":
            info["threads"].update(value)
        else:
            info[key] = value
    return info


def probe() -> dict:
    """The whole probe, torch imported here (no cache)."""
    return merge(cheap_probe(), torch_probe())


def torch_dir() -> str | None:
    """The folder torch would be imported from, found without importing it."""
    from importlib.util import find_spec

    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def main(argv: list[str]) -> None:
    """``envprobe.py [--cache DIR]``: the probe as one JSON line on stdout; with a cache folder,
    where the torch part came from on stderr (see probe_cache.py)."""
    if argv[:1] != ["--cache"]:
        sys.stdout.write(json.dumps(probe(), sort_keys=True) + "\n")
        return
    import probe_cache  # type: ignore[import-not-found]  # this script's neighbour: its folder is sys.path[0]

    cheap = cheap_probe()
    part, source = probe_cache.torch_part_of(cheap, torch_dir(), argv[1], torch_probe)
    sys.stdout.write(json.dumps(merge(cheap, part), sort_keys=True) + "\n")
    sys.stderr.write(f"envprobe: torch part {source}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
