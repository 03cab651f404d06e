"""The one strict JSON emitter for every ``--json`` output.

Strict: never a ``NaN`` or ``Infinity`` literal. Metric values are encoded by ``data.values``
before they get here; any other non-finite float (a figure derived from them, an option's
value) is written in that same encoding (``{"float": "NaN"}``), so that no document can
hold a literal a strict parser rejects, and none makes the command crash. Keys sorted,
two-space indent. Paths, runner classes and status enums are written as their text.
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


def _finite(doc: Any) -> Any:
    """``doc`` with every non-finite float encoded (lists, tuples and dicts walked)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else encode_value(doc)
    if isinstance(doc, dict):
        return {k: _finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_finite(v) for v in doc]
    return doc


def dump_json(doc: Any) -> str:
    """Strict, stable JSON text (sorted keys; no NaN/Infinity literals)."""
    return json.dumps(_finite(doc), indent=2, sort_keys=True, allow_nan=False, default=_plain)


def json_value(value: Any) -> Any:
    """A metric value for JSON: absent -> null, non-finite floats and huge ints encoded."""
    return None if value is ABSENT else encode_value(value)


def finite_or_none(x: float | None) -> float | None:
    """A derived figure (a difference, a ratio): null where it is not finite."""
    return x if x is None or math.isfinite(x) else None
