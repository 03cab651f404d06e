"""Read a trace dir (one ``<process>.<pid>.jsonl`` per process) into data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.errors import InputError

PROCESS_WORDS = {"main": "main process", "Ray actor": "Ray actor", "Ray task": "Ray task", "Ray worker": "Ray worker",
                 "multiprocessing child": "multiprocessing child", "DataLoader worker": "DataLoader worker",
                 "subprocess": "subprocess"}


@dataclass
class Draw:
    seq: int
    gen: str
    op: str
    site: str
    library: bool
    n: int
    state: str
    seeded: str | None
    t: float = 0.0
    task: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.gen, self.op, self.site, self.state)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "generator": self.gen, "op": self.op, "site": self.site, "library": self.library,
                "n": self.n, "state": self.state, "seeded": self.seeded, "task": self.task}


@dataclass
class ModuleCall:
    seq: int
    name: str
    cls: str
    n: int
    inputs: str
    outputs: str
    t: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "module": self.name, "class": self.cls, "call": self.n, "inputs": self.inputs,
                "outputs": self.outputs}


@dataclass
class Chain:
    """Draws (or calls) beyond the kept ones at one site: hash-chain checkpoints by count."""

    points: dict[int, str] = field(default_factory=dict)
    final: int | None = None  # the count at exit, when the process got to write it

    @property
    def count(self) -> int:
        return self.final if self.final is not None else max(self.points, default=0)

    def differs(self, other: "Chain") -> bool:
        """Fail closed on what both show: the chain at the largest count both reached, and
        the final counts when both processes wrote them."""
        common = set(self.points) & set(other.points)
        if common:
            at = max(common)
            if self.points[at] != other.points[at]:
                return True
        elif self.points or other.points:
            return True
        return self.final is not None and other.final is not None and self.final != other.final


@dataclass
class ProcessTrace:
    path: Path
    pid: int = 0
    kind: str = "subprocess"
    label: str = "process"
    actor_name: str = ""
    draws: list[Draw] = field(default_factory=list)
    seeds: list[dict[str, Any]] = field(default_factory=list)
    chains: dict[tuple[str, ...], Chain] = field(default_factory=dict)
    modules: list[ModuleCall] = field(default_factory=list)
    module_chains: dict[str, Chain] = field(default_factory=dict)

    @property
    def group(self) -> tuple[str, str, str]:
        """What identifies this process across runs (replicas share it)."""
        return (self.kind, self.label, self.actor_name)

    @property
    def display(self) -> str:
        name = f" {self.actor_name!r}" if self.actor_name else ""
        if self.kind == "main":
            return "main process"
        return f"{self.label}{name} ({PROCESS_WORDS.get(self.kind, self.kind)})"

    def generator_draws(self, gen: str) -> list[Draw]:
        return [d for d in self.draws if d.gen == gen]


@dataclass
class RunTrace:
    path: Path
    processes: list[ProcessTrace]
    errors: list[str] = field(default_factory=list)  # processes whose trace is incomplete


def read_process(path: Path) -> ProcessTrace:
    proc = ProcessTrace(path)
    identity: dict[str, Any] | None = None
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break  # a process killed mid-write: the torn line is dropped
            try:
                rec = json.loads(line)
                kind = rec["type"]
                if kind == "process":
                    # A Ray worker that became an actor keeps the actor identity.
                    if identity is None or identity.get("kind") != "Ray actor" or rec.get("kind") == "Ray actor":
                        identity = rec
                elif kind == "draw":
                    proc.draws.append(Draw(rec["seq"], rec["gen"], rec["op"], rec["site"], bool(rec["library"]),
                                           rec["n"], rec["state"], rec.get("seeded"), rec.get("t", 0.0), rec.get("task")))
                elif kind == "seed":
                    proc.seeds.append(rec)
                elif kind == "module":
                    proc.modules.append(ModuleCall(rec["seq"], rec["name"], rec["cls"], rec["n"], rec["in"], rec["out"],
                                                   rec.get("t", 0.0)))
                elif kind == "chain":
                    if rec["kind"] == "draw":
                        chain = proc.chains.setdefault((rec["gen"], rec["op"], rec["site"]), Chain())
                    else:
                        chain = proc.module_chains.setdefault(rec["name"], Chain())
                    chain.points[int(rec["count"])] = rec["chain"]
                    if rec.get("final"):
                        chain.final = int(rec["count"])
                else:
                    raise KeyError(f"unknown record type {kind!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(path, f"not a detaudit trace line: {exc}", number) from None
    if identity is not None:
        proc.pid = int(identity.get("pid", 0))
        proc.kind = identity.get("kind", "subprocess")
        proc.label = identity.get("label", "process")
        proc.actor_name = identity.get("actor_name", "") or ""
    return proc


def read_trace(directory: str | Path) -> RunTrace:
    """All processes of one run's trace dir, in a stable order (kind, label, pid)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, "no trace here (was the run started with --trace?)")
    processes = [read_process(p) for p in sorted(directory.glob("*.jsonl"))]
    errors = []
    for path in sorted(directory.glob("error.*.txt")):
        errors.append(f"pid {path.name.split('.')[1]}: " + path.read_text(encoding="utf-8", errors="replace").strip())
    processes.sort(key=lambda p: (p.kind != "main", p.kind, p.label, p.actor_name, p.pid))
    return RunTrace(directory, processes, errors)
