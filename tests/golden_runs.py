"""Runs built from golden files, read the framework's way (not with detaudit's readers).

``cells_of`` reads a golden into per-series (step, value) cells, ``"nan"`` for a Megatron-LM step
not logged; ``records_of`` builds the JSONL records of a run that logs exactly the golden's values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# A golden as cells: per series [(step, value)], value "nan" for a Megatron step not logged.
Cells = dict[str, list[tuple[Any, Any]]]


def cells_of(fmt: str, text: str) -> Cells:
    if fmt == "torchtitan":
        return {"loss": [(int(s), float(v)) for s, v in (line.split() for line in text.splitlines())]}
    doc = json.loads(text)
    if fmt == "miles":
        return {name: [tuple(p) for p in points] for name, points in doc["metrics"].items()}
    if fmt == "nemo":
        return {name: sorted((int(s), v) for s, v in entry.items()) for name, entry in doc.items()}
    out: Cells = {}
    for name, entry in doc.items():
        if not isinstance(entry, dict):
            continue
        values = entry["values"]
        if isinstance(values, list):  # legacy: item i is the run's (start + i*interval)-th logged value
            out[name] = [(entry["start_step"] + i * entry["step_interval"], v) for i, v in enumerate(values)]
        else:
            out[name] = sorted((int(s), v) for s, v in values.items())
    return out


def is_list_golden(text: str) -> bool:
    doc = json.loads(text)
    return any(isinstance(e, dict) and isinstance(e.get("values"), list) for e in doc.values())


def records_of(fmt: str, text: str, cells: Cells) -> list[dict[str, Any]]:
    """A run that logs the golden's values: a line per (series, step); Megatron "nan" cells not logged."""
    records = []
    if fmt == "megatron" and is_list_golden(text):  # log every iteration; the golden's positions get its values
        doc = json.loads(text)
        for name, points in cells.items():
            wanted = dict(points)
            for position in range(doc[name]["end_step"]):
                value = wanted.get(position, 1000.0 + position)
                if value != "nan":
                    records.append({"step_key": "iteration", "iteration": position + 1, name: value})
        return records
    for name, points in cells.items():
        for step, value in points:
            if value == "nan" and fmt == "megatron":
                continue
            records.append({"step_key": f"{name}/step", f"{name}/step": step, name: value})
    return records



def write_run(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
