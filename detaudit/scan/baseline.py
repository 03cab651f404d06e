"""scan-rng baselines: record today's findings, later report only new ones."""

from __future__ import annotations

import json
from pathlib import Path

from detaudit.errors import InputError
from detaudit.scan.findings import Finding

SCHEMA = "detaudit/scan-baseline/1"


def _fingerprint(f: Finding) -> tuple[str, str, str]:
    return (f.path, f.rule, " ".join(f.code.split()))


def write_baseline(path: str | Path, findings: list[Finding]) -> None:
    """Write every finding's (path, rule, code line) atomically; a one-line InputError if it cannot."""
    from detaudit.fileio import write_atomic

    entries = sorted({_fingerprint(f) for f in findings})
    doc = {"schema": SCHEMA, "findings": [{"path": p, "rule": r, "code": c} for p, r, c in entries]}
    try:
        write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", overwrite=True)
    except OSError as exc:
        raise InputError(path, f"cannot write baseline: {exc.strerror or exc}") from None


def apply_baseline(path: str | Path, findings: list[Finding]) -> tuple[list[Finding], int]:
    """Drop findings recorded in the baseline; returns (remaining, how many were dropped)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        known = {(e["path"], e["rule"], e["code"]) for e in doc["findings"]}
    except OSError as exc:
        raise InputError(path, f"cannot read baseline: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise InputError(path, f"not a scan-rng baseline ({exc})") from None
    kept = [f for f in findings if _fingerprint(f) not in known]
    return kept, len(findings) - len(kept)
