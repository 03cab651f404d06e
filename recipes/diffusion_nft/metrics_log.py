"""The run's metrics: miles-style JSONL lines, one per rollout, optimizer step and loop."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_ENV_VARS = ("DETAUDIT_METRICS_JSONL", "MILES_METRICS_JSONL")


def metrics_paths(configured: Path | None) -> list[Path]:
    """``--metrics-jsonl``, and the files the metrics variables name (detaudit sets one)."""
    paths = [configured] if configured else []
    paths += [Path(os.environ[var]) for var in METRICS_ENV_VARS if os.environ.get(var)]
    return paths


class MetricsLog:
    """Miles-style JSONL lines to every configured path (a tee), flushed per line."""

    def __init__(self, paths: list[Path]) -> None:
        import jsonlines

        self.writers = []
        for path in dict.fromkeys(paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            # Python's json writes NaN/Infinity literals, as miles does (detaudit reads both).
            self.writers.append(jsonlines.open(path, mode="w", flush=True, dumps=json.dumps))

    def write(self, step_key: str, step: int | float, values: dict[str, Any]) -> None:
        line = {"step_key": step_key, step_key: step, **values}
        for writer in self.writers:
            writer.write(line)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
