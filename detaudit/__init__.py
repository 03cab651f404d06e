"""detaudit: determinism auditor and e2e-standard recorder for ML training pipelines.

The library under the ``detaudit`` command. Nothing here imports torch at import time.
"""

from __future__ import annotations

__version__ = "0.1.0"

from detaudit.data.compare import DiffReport, diff_runs
from detaudit.data.exclusion import DEFAULT_EXCLUDE, Exclusion
from detaudit.data.metrics import MetricsRun, read_metrics
from detaudit.errors import InputError


def __getattr__(name: str) -> object:
    # `from detaudit import determinism`: the seeding API pipelines call in their own processes
    # (it lives in detaudit.env; imported on first use, so `import detaudit` stays light).
    if name == "determinism":
        from detaudit.env import determinism

        return determinism
    raise AttributeError(f"module 'detaudit' has no attribute {name!r}")


__all__ = [
    "DEFAULT_EXCLUDE",
    "DiffReport",
    "Exclusion",
    "InputError",
    "MetricsRun",
    "__version__",
    "determinism",
    "diff_runs",
    "read_metrics",
]
