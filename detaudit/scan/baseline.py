"""scan-rng baselines: record today's findings, later report only new ones.

A finding's fingerprint is its path, rule, code line (spaces folded; line numbers left out, so that
edits above it do not make it new), its function, its verdict and its processes (each with
whether it seeds the draw's RNG). A finding is known, and hidden, only when the baseline holds one
with the same path, rule, code and function whose verdict is at least as severe, whose processes
include every process that runs it now, and in which every process unseeded now was unseeded
already. So a warning that becomes unproven or an error, the same code in a new function, a new
process that runs a draw, and a process that stops seeding (a removed seed call) are all new.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from detaudit.errors import InputError
from detaudit.scan.findings import VERDICT_RANK, Finding

SCHEMA = "detaudit/scan-baseline/2"
OLD_SCHEMAS = ("detaudit/scan-baseline/1",)

Key = tuple[str, str, str, str]  # (path, rule, code with spaces folded, function)


def _key(path: str, rule: str, code: str, function: str) -> Key:
    return (path, rule, " ".join(code.split()), function)


def _record(f: Finding) -> dict[str, Any]:
    path, rule, code, function = _key(f.path, f.rule, f.code, f.function)
    return {"path": path, "rule": rule, "code": code, "function": function, "verdict": f.severity,
            "processes": sorted(({"entry": p["entry"], "seeded": p["seeded"]} for p in f.processes),
                                key=lambda p: (p["entry"], str(p["seeded"])))}


def write_baseline(path: str | Path, findings: list[Finding]) -> None:
    """Write every finding's fingerprint atomically; a one-line InputError if it cannot."""
    from detaudit.fileio import write_atomic

    records = sorted((_record(f) for f in findings), key=lambda r: json.dumps(r, sort_keys=True))
    doc = {"schema": SCHEMA, "findings": records}
    try:
        write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", overwrite=True)
    except OSError as exc:
        raise InputError(path, f"cannot write baseline: {exc.strerror or exc}") from None


def _known(f: Finding, recorded: list[dict[str, Any]]) -> bool:
    """Whether one of the baseline's records of ``f``'s place covers ``f`` (see the module doc)."""
    entries = {p["entry"] for p in f.processes}
    unseeded = {p["entry"] for p in f.processes if p["seeded"] is False}
    for r in recorded:
        before = {p["entry"] for p in r["processes"]}
        before_unseeded = {p["entry"] for p in r["processes"] if p["seeded"] is False}
        if VERDICT_RANK[f.severity] <= VERDICT_RANK[r["verdict"]] and entries <= before \
                and unseeded <= before_unseeded:
            return True
    return False


_SCHEMA_FIELD = re.compile(rb'"schema"\s*:\s*"detaudit/scan-baseline/')


def is_baseline(path: str) -> bool:
    """Whether the file at ``path`` starts as a baseline scan-rng writes (its schema near the top)."""
    try:
        with open(path, "rb") as fh:
            return _SCHEMA_FIELD.search(fh.read(4096)) is not None
    except OSError:
        return False


def read_baseline(path: str | Path) -> dict[Key, list[dict[str, Any]]]:
    """The baseline's records by (path, rule, code, function); a one-line InputError when the file
    cannot be read or is not a baseline this version writes."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(path, f"cannot read baseline: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a scan-rng baseline ({exc})") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema in OLD_SCHEMAS:
        raise InputError(path, "a baseline of an older scan-rng, without verdicts or processes: write it again "
                               "with --write-baseline")
    if schema != SCHEMA:
        raise InputError(path, f"not a scan-rng baseline (schema {schema!r}, expected {SCHEMA!r})")
    known: dict[Key, list[dict[str, Any]]] = {}
    try:
        for r in doc["findings"]:
            if r["verdict"] not in VERDICT_RANK or not all(isinstance(p["entry"], str) for p in r["processes"]):
                raise TypeError("a record of the wrong shape")
            known.setdefault(_key(r["path"], r["rule"], r["code"], r["function"]), []).append(r)
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(path, f"not a scan-rng baseline ({exc})") from None
    return known


def apply_baseline(path: str | Path, findings: list[Finding]) -> tuple[list[Finding], int]:
    """Drop the findings the baseline knows (see the module doc); returns (the new ones, how many
    were dropped)."""
    known = read_baseline(path)
    kept = [f for f in findings if not _known(f, known.get(_key(f.path, f.rule, f.code, f.function), []))]
    return kept, len(findings) - len(kept)
