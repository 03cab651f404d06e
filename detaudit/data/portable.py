"""Portable CPU profiles: settings under which one CPU standard holds on every x86-64 machine that
can honour them, whatever its model, vendor or instruction-set extensions.

A card opts in with ``portable = "x86_64-v1"``. Every process of its runs (and the environment
probe) then gets the profile's variables, and its standards are bound to the profile's runner
class (``cpu-x86_64-portable-v1``) instead of the exact CPU model. What each variable is for, from
measurements on AMD EPYC Zen 4 and Intel Xeon 6.207 / 6.167 machines (docs/standards-across-machines.md):

- torch picks its vectorised CPU kernels (and their transcendental approximations) by ISA:
  ``ATEN_CPU_CAPABILITY=default`` runs the baseline kernels everywhere;
- oneDNN (convolutions, some matmuls) picks its kernel by ISA, AMX included:
  ``ONEDNN_MAX_CPU_ISA`` / ``DNNL_MAX_CPU_ISA`` cap it at SSE4.1;
- MKL and OpenBLAS pick code paths by CPU: ``MKL_CBWR=COMPATIBLE``, ``MKL_ENABLE_INSTRUCTIONS=SSE4_2``,
  ``OPENBLAS_CORETYPE=Nehalem``;
- numpy dispatches its loops by CPU feature at run time: ``NPY_DISABLE_CPU_FEATURES`` turns every
  dispatched level above its x86-64-v2 baseline off;
- reductions split across threads add in another order: one thread per library.

A machine honours the profile when it is x86-64, has the flags the capped kernels use, and its torch
reports the capped capability (a torch that ignored ``ATEN_CPU_CAPABILITY`` would run other kernels).
Otherwise ``refusal`` says why, and record and verify refuse instead of comparing bits that were never
promised to match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from detaudit.runner_class import RunnerClass

# numpy >= 2.4 dispatches on x86-64 micro-architecture levels (baseline X86_V2); older numpy on single
# features. Names a numpy does not dispatch on are ignored by it (with an ImportWarning), so both sets.
_NUMPY_AVX = ("X86_V3 X86_V4 AVX512_ICL AVX512_SPR "
              "AVX AVX2 FMA3 F16C AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_FP16")


@dataclass(frozen=True)
class PortableProfile:
    """A named set of settings that makes CPU kernels the same on every machine that can honour it."""

    name: str
    machine: str  # platform.machine() the profile is for
    env: Mapping[str, str] = field(default_factory=dict)
    required_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags the capped kernels still use
    capability: str = "DEFAULT"  # torch.backends.cpu.get_cpu_capability() under the profile

    @property
    def runner_class(self) -> RunnerClass:
        """``cpu-x86_64-portable-v1``: the class of every standard recorded under this profile."""
        return RunnerClass(("cpu", self.machine, "portable", self.name.rsplit("-", 1)[-1]))

    def refusal(self, info: Mapping[str, Any]) -> str | None:
        """Why a machine (an environment probe taken with the profile's variables) cannot honour the
        profile; None when it can."""
        machine = info.get("machine")
        if machine != self.machine:
            return f"portable profile {self.name} is for {self.machine} machines; this one is {machine or 'unknown'}"
        flags = set((info.get("cpu") or {}).get("flags") or ())
        missing = [f for f in self.required_flags if f not in flags]
        if missing:
            return f"portable profile {self.name} needs CPU flags {', '.join(missing)}, which this CPU lacks"
        capability = str(info.get("cpu_capability", "unknown"))
        if capability.upper() != self.capability:
            return (f"portable profile {self.name} needs torch to run its {self.capability} CPU kernels "
                    f"(ATEN_CPU_CAPABILITY), but this torch reports {capability}")
        threads = info.get("threads") or {}
        if threads.get("torch_intra_op") not in (None, 1):
            return (f"portable profile {self.name} runs one thread per library, but torch runs "
                    f"{threads.get('torch_intra_op')} intra-op threads")
        return None


PROFILES: dict[str, PortableProfile] = {
    "x86_64-v1": PortableProfile(
        name="x86_64-v1",
        machine="x86_64",
        env={
            "ATEN_CPU_CAPABILITY": "default",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "DNNL_MAX_CPU_ISA": "SSE41",
            "MKL_CBWR": "COMPATIBLE",
            "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
            "OPENBLAS_CORETYPE": "Nehalem",
            "NPY_DISABLE_CPU_FEATURES": _NUMPY_AVX,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        },
        required_flags=("sse4_2",),
    ),
}
