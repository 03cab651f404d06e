"""The package's layers: no module imports a layer above its own, and there is no import circle.

Floors, bottom up (a module may import its own floor and any below):
errors, runner_class, fileio < data < standards, env < run, trace < results < flows < render < ci < cli, pytest_plugin.
scan is a tool of its own beside them (it imports errors and scan only).
"""

from __future__ import annotations

import ast
from pathlib import Path

import detaudit

PACKAGE = Path(detaudit.__file__).resolve().parent

FLOORS = {
    "errors": 0, "runner_class": 0, "fileio": 0,
    "data": 1,
    "standards": 2, "env": 2,
    "run": 3, "trace": 3,
    "results": 4,
    "flows": 5,
    "render": 6,
    "ci": 7,
    "cli": 8, "pytest_plugin": 8, "__main__": 8,
}
SCAN_ALLOWED = {"errors", "fileio", "scan", "__version__", ""}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        if "site" in rel.parts or "probes" in rel.parts:
            continue  # scripts run in recipe processes, never imported by the tool
        out[".".join(("detaudit",) + rel.parts).removesuffix(".__init__")] = path
    return out


def _imports(path: Path, *, runtime_only: bool, modules: frozenset[str] = frozenset()) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    type_checking = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                     and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                     for n in ast.walk(node)}
    for node in ast.walk(tree):
        if runtime_only and id(node) in type_checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("detaudit"):
            submodules = {f"{node.module}.{a.name}" for a in node.names} & modules
            found.update(submodules)  # `from pkg import module` imports the module, not the package's names
            if len(submodules) < len(node.names):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("detaudit"))
    return found


def _floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def test_no_module_imports_a_layer_above_its_own() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) < 2:
            continue
        if parts[1] == "scan":
            bad = [m for m in _imports(path, runtime_only=False) if (m.split(".") + [""])[1] not in SCAN_ALLOWED]
            upward += [f"{name} -> {m}" for m in bad]
            continue
        own = _floor(name)
        assert own is not None, f"{name}: a top-level module with no floor (add it to FLOORS)"
        for target in _imports(path, runtime_only=False):
            floor = _floor(target)
            if floor is not None and floor > own:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(sorted(upward))


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: {m for m in _imports(path, runtime_only=True, modules=frozenset(modules)) if m in modules and m != name}
             for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)
