"""``--scan FILE``: the findings of a ``scan-rng --format json`` report that name a process of
this run.

A finding names the processes it runs in (``{"entry", "kind", "target", "seeded"}``); the
run's trace names the processes that ran (kind and label). A Ray actor matches by class name,
a Ray task by function name, ``__main__`` by the module the card's command runs, and a
multiprocessing or DataLoader target by its kind (a child process has no name to match by).
Without a trace the run's processes are unknown: every finding is listed, and the page says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.card import Card
from detaudit.errors import InputError
from detaudit.fileio import read_bounded

# A scan report of a large tree is a few MB; reading stops here (bounded memory).
MAX_SCAN_BYTES = 64 << 20
REQUIRED = ("path", "line", "rule", "severity", "message", "processes")
# scan-rng's process kinds -> the trace's
TRACE_KIND = {"ray-actor": "Ray actor", "ray-task": "Ray task", "multiprocessing": "multiprocessing child",
              "worker-init": "DataLoader worker", "main": "main"}
BY_KIND_ONLY = ("multiprocessing", "worker-init")


@dataclass
class Findings:
    path: Path
    items: list[dict[str, Any]]


@dataclass
class FindingRow:
    where: str  # path:line:col
    rule: str
    severity: str
    message: str
    code: str
    processes: str  # each process the finding runs in, and whether it seeds
    matched: list[str] = field(default_factory=list)  # of those, the ones that ran in this run


@dataclass
class FindingsView:
    source: str
    matched: list[FindingRow]
    others: list[FindingRow]
    note: str


def read_scan_findings(path: str | Path) -> Findings:
    """A ``detaudit scan-rng --format json`` report; ``InputError`` naming the file otherwise."""
    path = Path(path)
    raw = read_bounded(path, "scan-rng report", MAX_SCAN_BYTES)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InputError(path, f"not a scan-rng JSON report (detaudit scan-rng --format json): {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
        doc = doc["findings"]  # {"counts": ..., "findings": [...]}; a list of findings before verdict counts
    if not isinstance(doc, list):
        raise InputError(path, "not a scan-rng JSON report (detaudit scan-rng --format json): expected a list of findings")
    for i, item in enumerate(doc):
        missing = [k for k in REQUIRED if not isinstance(item, dict) or k not in item]
        if missing:
            raise InputError(path, f"finding {i} lacks {', '.join(missing)}: not a scan-rng JSON report")
        if not isinstance(item["processes"], list) or not all(isinstance(p, dict) for p in item["processes"]):
            raise InputError(path, f"finding {i}: \"processes\" must be a list of objects")
    return Findings(path, doc)


def main_modules(card: Card | None) -> set[str]:
    """The modules whose ``__main__`` the card's command runs (``-m MODULE`` or a script)."""
    if card is None:
        return set()
    command = list(card.command)
    modules = set()
    for i, word in enumerate(command):
        if word == "-m" and i + 1 < len(command):
            modules |= {command[i + 1], command[i + 1] + ".__main__"}
        elif word.endswith(".py"):
            modules.add(Path(word).with_suffix("").as_posix().replace("/", "."))
    return modules


def _ran(process: dict[str, Any], traced: list[tuple[str, str]], mains: set[str]) -> bool:
    kind = process.get("kind")
    target = str(process.get("target", ""))
    trace_kind = TRACE_KIND.get(str(kind))
    if trace_kind is None:
        return False
    if kind == "main":
        module = target.rsplit(".", 1)[0]
        return any(k == "main" for k, _ in traced) and any(module == m or module.endswith("." + m) or
                                                           m.endswith("." + module) for m in mains)
    if kind in BY_KIND_ONLY:
        return any(k == trace_kind for k, _ in traced)
    name = target.rsplit(".", 1)[-1]
    return (trace_kind, name) in traced


def _row(item: dict[str, Any]) -> FindingRow:
    parts = []
    for p in item["processes"]:
        seeded = p.get("seeded")
        word = "" if seeded is None else (" seeded" if seeded and seeded is not False else " UNSEEDED")
        parts.append(f"{p.get('entry', '?')}{word}")
    return FindingRow(f"{item['path']}:{item['line']}:{item.get('col', 0)}", str(item["rule"]), str(item["severity"]),
                      str(item["message"]), str(item.get("code", "")),
                      "runs in: " + ", ".join(parts) if parts else str(item.get("note", "")))


def findings_view(findings: Findings, traced: list[tuple[str, str]] | None, card: Card | None) -> FindingsView:
    """The findings split into those naming a process of this run and the rest."""
    rows = [(item, _row(item)) for item in findings.items]
    if traced is None:
        return FindingsView(str(findings.path), [], [r for _, r in rows],
                            "the run was not traced (--trace), so its processes are unknown: every finding is listed")
    mains = main_modules(card)
    matched: list[FindingRow] = []
    others: list[FindingRow] = []
    for item, row in rows:
        row.matched = [str(p.get("entry", "?")) for p in item["processes"] if _ran(p, traced, mains)]
        (matched if row.matched else others).append(row)
    kinds = sorted({k for k, _ in traced})
    return FindingsView(str(findings.path), matched, others,
                        f"{len(traced)} processes in this run's trace ({', '.join(kinds)}); "
                        f"{len(matched)} of {len(rows)} findings run in one of them")
