"""detaudit: determinism auditor and e2e-standard recorder for ML training pipelines.

The library under the ``detaudit`` command. Nothing here imports torch at import time.
"""

from __future__ import annotations

__version__ = "0.1.0"

from detaudit.data.compare import DiffReport, diff_runs
from detaudit.data.exclusion import DEFAULT_EXCLUDE, Exclusion
from detaudit.data.metrics import MetricsRun, read_metrics
from detaudit.errors import InputError

__all__ = [
    "DEFAULT_EXCLUDE",
    "DiffReport",
    "Exclusion",
    "InputError",
    "MetricsRun",
    "__version__",
    "diff_runs",
    "read_metrics",
]
