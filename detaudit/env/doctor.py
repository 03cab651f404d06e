"""``detaudit doctor``: the determinism preflight, per process of a run, Ray workers included.

It starts ``detaudit.env.probes.doctor_probe`` with the card's environment (interpreter, variables,
PYTHONPATH), which reports three processes: the run process as it starts, the driver after
``determinism.enable(seed)``, and a Ray worker started through
``determinism.ray_runtime_env(seed)`` in a Ray the probe starts for itself (never a cluster the
machine's ``RAY_ADDRESS`` or a ``ray start`` names). Each gets the rows below; a failing row has a fix.

Fail closed: a probe that does not report is a failing row, not a pass. Rows that only
matter on a GPU (cuBLAS workspace, TF32, NCCL) pass as "n/a" where the process sees no CUDA.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.data.card import Card, run_env

CUBLAS_OK = (":4096:8", ":16:8")
DEFAULT_SEED = 1234
PROBE_MARK = "DETAUDIT_DOCTOR "


@dataclass(frozen=True)
class Row:
    process: str
    check: str
    ok: bool
    value: str
    fix: str = ""


def _row(process: str, check: str, ok: bool, value: str, fix: str) -> Row:
    return Row(process, check, ok, value, "" if ok else fix)


def fixed_hash_seed(value: str | None) -> bool:
    """Whether PYTHONHASHSEED fixes str hashing: an integer 0..4294967295 (CPython's range), not
    "random", empty or unset."""
    return value is not None and value.strip().isdigit() and int(value) <= 4294967295


def evaluate(process: str, f: dict[str, Any], *, seed: int, gpus_per_run: int, at_start: bool,
             env_rows: bool = True) -> list[Row]:
    """The rows of one process from its probe facts (``doctor_probe.facts``).

    ``at_start``: only the rows a process's start decides (variables); ``env_rows`` False
    leaves those out (the driver is the start process, already reported).
    """
    rows: list[Row] = []
    env = f.get("env", {})
    cuda = bool(f.get("cuda_available"))
    if not env_rows:
        return _code_rows(process, f, seed, cuda)
    # A fixed seed other than 0 is as deterministic as 0, though CPython still reports hash
    # randomization on for it; the probe reads the variables the process started with.
    fixed = fixed_hash_seed(env.get("PYTHONHASHSEED"))
    hashed = f.get("hash_randomization") == 0 or fixed
    state = "off" if f.get("hash_randomization") == 0 else "seeded" if fixed else "on"
    rows.append(_row(process, "PYTHONHASHSEED", hashed,
                     f"hash randomization {state} (PYTHONHASHSEED={env.get('PYTHONHASHSEED')})",
                     "add PYTHONHASHSEED = \"0\" to the card's [env] table (any fixed integer works); setting it "
                     "from inside the program (os.environ) is too late: str hashing is fixed when the interpreter "
                     "starts"))
    cublas = env.get("CUBLAS_WORKSPACE_CONFIG")
    rows.append(_row(process, "CUBLAS_WORKSPACE_CONFIG", cublas in CUBLAS_OK or not cuda,
                     str(cublas) if cuda else f"{cublas} (n/a: no CUDA device)",
                     "set CUBLAS_WORKSPACE_CONFIG = \":4096:8\" in the card's env, before CUDA starts"))
    nccl = env.get("NCCL_ALGO")
    needs_nccl = gpus_per_run > 1
    rows.append(_row(process, "NCCL_ALGO", bool(nccl) or not needs_nccl,
                     str(nccl) if needs_nccl else f"{nccl} (n/a: {gpus_per_run} GPU per run)",
                     "pin the collective algorithm: NCCL_ALGO = \"Ring\" (or \"Tree\") in the card's env"))
    if at_start:
        return rows
    return rows + _code_rows(process, f, seed, cuda)


def _code_rows(process: str, f: dict[str, Any], seed: int, cuda: bool) -> list[Row]:
    """Rows that code in the process decides (flags, backends, seeds)."""
    rows: list[Row] = []
    if f.get("torch") is None:
        rows.append(_row(process, "torch", True, "not installed (no torch settings to check)", ""))
        return rows
    rows.append(_row(process, "deterministic algorithms", bool(f.get("deterministic_algorithms")),
                     str(f.get("deterministic_algorithms")),
                     "torch.use_deterministic_algorithms(True) in this process (detaudit.env.determinism.enable)"))
    cudnn_ok = bool(f.get("cudnn_deterministic")) and not f.get("cudnn_benchmark")
    rows.append(_row(process, "cuDNN", cudnn_ok,
                     f"deterministic={f.get('cudnn_deterministic')}, benchmark={f.get('cudnn_benchmark')}",
                     "torch.backends.cudnn.deterministic = True; torch.backends.cudnn.benchmark = False"))
    tf32 = bool(f.get("tf32_matmul")) or bool(f.get("tf32_cudnn")) or f.get("float32_matmul_precision") != "highest"
    rows.append(_row(process, "TF32", not tf32 or not cuda,
                     f"matmul={f.get('tf32_matmul')}, cudnn={f.get('tf32_cudnn')}, "
                     f"precision={f.get('float32_matmul_precision')}" + ("" if cuda else " (n/a: no CUDA device)"),
                     "torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False; "
                     "torch.set_float32_matmul_precision(\"highest\")"))
    sdpa = f.get("sdpa", {})
    allowed = [name for name, on in sorted(sdpa.items()) if on]
    rows.append(_row(process, "SDPA backends", allowed == ["math"], ", ".join(allowed) or "none",
                     "allow only the math SDPA kernel (flash and mem-efficient backward are not deterministic): "
                     "determinism.enable(seed) does, or torch.backends.cuda.enable_flash_sdp(False) etc."))
    seeded = f.get("torch_initial_seed") == seed and f.get("numpy_mt0") in (None, seed % 2**32)
    rows.append(_row(process, "seeds", seeded,
                     f"torch initial seed {f.get('torch_initial_seed')}, numpy key[0] {f.get('numpy_mt0')} (expected {seed})",
                     "seed this process: determinism.enable(seed); Ray workers: ray.init(runtime_env="
                     "determinism.ray_runtime_env(seed))"))
    return rows


def run_doctor(card: Card, *, seed: int = DEFAULT_SEED, ray: bool = True, timeout_s: float = 600) -> list[Row]:
    """Probe the processes a run of ``card`` gets; every row, failing ones with a fix."""
    with tempfile.TemporaryDirectory(prefix="detaudit-doctor-") as tmp:
        workdir = Path(tmp)
        env = run_env(card, workdir, workdir / "metrics.jsonl", 0)
        detaudit_root = str(Path(__file__).resolve().parents[1])  # the probe imports this detaudit
        env["PYTHONPATH"] = detaudit_root + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, "-m", "detaudit.env.probes.doctor_probe", str(seed)] + (["--ray"] if ray else [])
        try:
            proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return [Row("probe", "probe", False, f"no report within {timeout_s:g}s", "run `detaudit doctor` again; "
                        "check that Ray starts here")]
    line = next((out for out in proc.stdout.splitlines() if out.startswith(PROBE_MARK)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return [Row("probe", "probe", False, f"exit code {proc.returncode}: {tail[:200]}",
                    "the probe must run in the card's environment: Python with detaudit (and, for the Ray "
                    "row, ray) importable, and a Ray of its own able to start here")]
    report = json.loads(line[len(PROBE_MARK):])
    rows = evaluate("run process at start", report["start"], seed=seed, gpus_per_run=card.gpus_per_run, at_start=True)
    rows += evaluate("driver after enable()", report["driver"], seed=seed, gpus_per_run=card.gpus_per_run, at_start=False,
                     env_rows=False)
    if ray:
        worker = report.get("ray worker", {})
        if "error" in worker:
            rows.append(Row("Ray worker", "ray", True, f"n/a: {worker['error']}"))
        else:
            rows += evaluate("Ray worker (ray_runtime_env)", worker, seed=seed, gpus_per_run=card.gpus_per_run,
                             at_start=False)
    return rows
