"""Cross-module analysis: processes, what each reaches, whether it seeds, and the findings.

Processes come from entry points (Ray actors and tasks, ``__main__`` blocks, console
scripts, multiprocessing targets, DataLoader ``worker_init_fn``). A process seeds an RNG
family when its start-up code calls a seed function, directly or through helpers in the
scanned tree: an actor's ``__init__``, a task's or target's own body, the main block. A
Ray ``worker_process_setup_hook`` found in the tree seeds every Ray process.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from detaudit.scan.facts import MAIN_BLOCK
from detaudit.scan.rules import FAMILY

KIND_LABEL = {
    "ray-actor": "Ray actor",
    "ray-task": "Ray task",
    "main": "__main__",
    "script": "console script",
    "multiprocessing": "multiprocessing target",
    "worker-init": "DataLoader worker_init_fn",
}


@dataclass
class Process:
    name: str  # what a reader recognises: "RolloutManager (Ray actor)"
    kind: str
    target: str
    seeded: set[str]  # RNG families seeded at start-up
    roots: list[str]
    reach: set[str] = field(default_factory=set)

    def as_dict(self, family: str) -> dict[str, Any]:
        return {"entry": self.name, "kind": self.kind, "target": self.target,
                "seeded": (family in self.seeded) if family else None}


@dataclass
class Finding:
    path: str
    line: int
    col: int
    rule: str
    severity: str
    message: str
    code: str
    function: str
    guards: list[str]
    processes: list[dict[str, Any]]
    note: str = ""
    end_line: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "line": self.line, "col": self.col, "rule": self.rule, "severity": self.severity,
            "message": self.message, "code": self.code, "function": self.function, "guards": self.guards,
            "processes": self.processes, "note": self.note,
        }


class Program:
    """All scanned modules' facts, with name resolution across them."""

    def __init__(self, facts: dict[str, dict[str, Any]], load_module: Callable[[str], bool] | None = None) -> None:
        self.paths: dict[str, str] = {}  # module -> path
        self.modules: dict[str, dict[str, Any]] = {}
        self.functions: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.load_module = load_module
        for path, f in facts.items():
            self.add(path, f)
        self._seeds: dict[str, frozenset[str]] = {}
        self._callees: dict[str, list[str]] = {}

    def add(self, path: str, f: dict[str, Any]) -> None:
        self.paths[f["module"]] = path
        self.modules[f["module"]] = f
        self.functions.update(f["functions"])
        self.classes.update(f["classes"])

    def canonical(self, name: str, depth: int = 0) -> str | None:
        """The function or class a qualified name denotes (through re-exports), or None."""
        if name in self.functions or name in self.classes:
            return name
        if depth > 8:
            return None
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            facts = self.modules.get(module)
            if facts is None and self.load_module is not None and self.load_module(module):
                facts = self.modules.get(module)
                if name in self.functions or name in self.classes:
                    return name
            if facts is None:
                continue
            target = facts["imports"].get(parts[i])
            if target is not None and target != name:
                rest = parts[i + 1 :]
                return self.canonical(".".join([target, *rest]), depth + 1)
            return None
        return None

    def callees(self, function: str) -> list[str]:
        cached = self._callees.get(function)
        if cached is not None:
            return cached
        out: list[str] = []
        info = self.functions.get(function)
        for call in info["calls"] if info else ():
            target = self.canonical(call)
            if target is None:
                continue
            if target in self.classes:
                init = self.canonical(f"{target}.__init__")
                if init is not None:
                    out.append(init)
            else:
                out.append(target)
        self._callees[function] = out
        return out

    def seeds(self, function: str) -> frozenset[str]:
        """RNG families a call of ``function`` seeds, directly or through callees."""
        if function in self._seeds:
            return self._seeds[function]
        seen = {function}
        order = [function]
        queue = deque([function])
        while queue:
            current = queue.popleft()
            for callee in self.callees(current):
                if callee not in seen:
                    seen.add(callee)
                    order.append(callee)
                    queue.append(callee)
        families: set[str] = set()
        for fn in order:
            info = self.functions.get(fn)
            if info:
                families.update(info["seeds"])
        result = frozenset(families)
        self._seeds[function] = result
        return result

    def reach(self, roots: list[str]) -> set[str]:
        seen = set(roots)
        queue = deque(roots)
        while queue:
            for callee in self.callees(queue.popleft()):
                if callee not in seen:
                    seen.add(callee)
                    queue.append(callee)
        return seen


def build_processes(program: Program, scripts: list[str]) -> list[Process]:
    hook_families: set[str] = set()
    for facts in list(program.modules.values()):
        for hook in facts["hooks"]:
            target = program.canonical(hook)
            if target is not None:
                hook_families |= program.seeds(target)
    processes: list[Process] = []
    entries = [(e, f["module"]) for f in list(program.modules.values()) for e in f["entries"]]
    entries += [({"kind": "script", "target": s, "line": 0}, "") for s in scripts]
    seen: set[tuple[str, str]] = set()
    for entry, module in sorted(entries, key=lambda em: (em[0]["target"], em[0]["kind"])):
        target = program.canonical(entry["target"])
        if target is None:
            continue
        kind = entry["kind"]
        short = target.rsplit(".", 1)[-1]
        if kind in ("ray", "ray-actor", "ray-task"):
            if target in program.classes:
                kind = "ray-actor"
                roots = list(program.classes[target]["methods"])
                init = program.canonical(f"{target}.__init__")
                seeded = set(program.seeds(init)) if init else set()
            else:
                kind = "ray-task"
                roots = [target]
                seeded = set(program.seeds(target))
            seeded |= hook_families
        elif kind == "main":
            short = f"__main__ of {program.paths.get(target.rsplit('.', 1)[0], target)}"
            if short.startswith("__main__ of /"):
                short = "__main__ of " + target.rsplit(".", 1)[0]
            roots = [target]
            seeded = set(program.seeds(target))
        else:
            roots = [program.canonical(f"{target}.__init__") or target] if target in program.classes else [target]
            seeded = set(program.seeds(roots[0]))
            if kind == "worker-init":
                seeded.add("torch")  # DataLoader seeds each worker's torch RNG from its own base seed
        if (kind, target) in seen:
            continue
        seen.add((kind, target))
        name = short if kind == "main" else f"{short} ({KIND_LABEL[kind]})"
        process = Process(name, kind, target, seeded, roots)
        process.reach = program.reach(roots)
        processes.append(process)
    return processes


def findings_for(program: Program, processes: list[Process], rel: Callable[[str], str]) -> list[Finding]:
    findings: list[Finding] = []
    for module, facts in sorted(program.modules.items(), key=lambda mf: program.paths[mf[0]]):
        path = rel(program.paths[module])
        suppress = facts["suppress"]
        for draw in facts["draws"]:
            marks = suppress.get(draw["line"]) or suppress.get(draw["end_line"]) or []
            if "*" in marks or draw["rule"] in marks:
                continue
            family = FAMILY[draw["rule"]]
            function = draw["function"]
            mine = [p for p in processes if function in p.reach]
            if not family:
                severity, note = "error", "nondeterministic in any process"
            elif any(family not in p.seeded for p in mine):
                severity, note = "error", f"runs in a process that never seeds the {family} RNG"
            elif mine:
                severity, note = "warning", f"every process that runs it seeds the {family} RNG; reproducible only while the call order stays fixed"
            else:
                severity = "warning"
                where = "module level" if function.endswith(("<module>",)) or function in program.classes else "no known process"
                note = f"{where}: no entry point found that runs it"
            findings.append(Finding(
                path=path, line=draw["line"], col=draw["col"], rule=draw["rule"], severity=severity,
                message=draw["message"], code=draw["code"], function=function.replace(f".{MAIN_BLOCK}", ".__main__"),
                guards=draw["guards"], processes=[p.as_dict(family) for p in mine], note=note,
                end_line=draw["end_line"],
            ))
    findings.sort(key=lambda f: (f.path, f.line, f.col, f.rule))
    return findings
