"""detaudit: determinism auditor and e2e-standard recorder for ML training pipelines.

The library under the ``detaudit`` command. Nothing here imports torch at import time.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from detaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from detaudit.data.compare import DiffReport, diff_runs
    from detaudit.data.exclusion import DEFAULT_EXCLUDE, Exclusion
    from detaudit.data.metrics import MetricsRun, read_metrics
    from detaudit.env import determinism
    from detaudit.errors import InputError

# Imported on first use, so that `import detaudit` (every command's start) stays light;
# `from detaudit import determinism` is the seeding API pipelines call in their own processes.
__getattr__ = lazy_attributes(__name__, {
    "detaudit.data.compare": ("DiffReport", "diff_runs"),
    "detaudit.data.exclusion": ("DEFAULT_EXCLUDE", "Exclusion"),
    "detaudit.data.metrics": ("MetricsRun", "read_metrics"),
    "detaudit.errors": ("InputError",),
    "detaudit.env": ("determinism",),
})


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
