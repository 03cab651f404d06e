"""A JSON object that names a key twice is an error: Python's json and orjson both keep the last
value silently, so two files that differ could read the same. Metrics lines and standards use it."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """A JSON object names ``key`` twice (raised by ``unique_pairs``)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads`` that refuses a key named twice in one object
    (Python's json, like orjson, keeps the last one silently). Standards use it too."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def duplicate_key(raw: bytes) -> str | None:
    """A key that a line's JSON names twice in one object, else None (orjson and json keep the
    last one silently). Parses again with a hook that sees every key: the slow path, taken only
    for a line with more colons than its object has keys (see ``read_metrics``)."""
    try:
        json.loads(raw, object_pairs_hook=unique_pairs)
    except DuplicateKey as dup:
        return dup.key
    return None
