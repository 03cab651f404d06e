"""The one strict JSON emitter for every ``--json`` output.

Strict: never a ``NaN`` or ``Infinity`` literal (values are encoded by ``data.values`` before
they get here; a stray one is an error, not bad JSON), keys sorted, two-space indent. Paths,
runner classes and status enums are written as their text.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import PurePath
from typing import Any

from detaudit.data.compare import ABSENT
from detaudit.data.values import encode_value
from detaudit.runner_class import RunnerClass


def _plain(value: Any) -> Any:
    if isinstance(value, RunnerClass):
        return value.to_json()
    if isinstance(value, (PurePath, Enum)):
        return str(value.value if isinstance(value, Enum) else value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dump_json(doc: Any) -> str:
    """Strict, stable JSON text (sorted keys; no NaN/Infinity literals)."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False, default=_plain)


def json_value(value: Any) -> Any:
    """A metric value for JSON: absent -> null, non-finite floats and huge ints encoded."""
    return None if value is ABSENT else encode_value(value)


def finite_or_none(x: float | None) -> float | None:
    """A derived figure (a difference, a ratio): null where it is not finite."""
    return x if x is None or math.isfinite(x) else None
