"""The layers of the package and of the reference pipeline: no module imports a layer above its own,
and there is no import circle in `detaudit/` or `recipes/`.

Floors, bottom up (a module may import its own floor and any below):
errors, runner_class, fileio, lazy < data < standards, env, the package's face (`detaudit/__init__.py`) < run, trace
< flows (use cases and their result objects) < render (every output: text, JSON, HTML, CI reports) < cli, pytest_plugin, __main__.
scan is a tool of its own beside them: it imports errors, fileio, scan and the package's __version__ only, and
only render and cli may import it. A module whose folder has no floor fails the test until it is given one.
recipes/ is a user's pipeline beside the tool: it uses the library's floors (at most standards, env),
never the tool that runs and judges it; detaudit never imports recipes/ (the recipe is not in the wheel).

Every import counts, wherever it is written: at module level, inside a function, and under
``if TYPE_CHECKING:``. A circle closed by a type-only import is still two modules that need each
other: neither can be read, moved or tested alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGES = ("detaudit", "recipes")
FLOORS = {
    "errors": 0, "runner_class": 0, "fileio": 0, "lazy": 0,
    "data": 1,
    "standards": 2, "env": 2,
    "": 2,  # the package's face: its __init__ hands on names of data and errors, and env's `determinism`
    "run": 3, "trace": 3,
    "flows": 4,
    "render": 5,
    "scan": 5,  # for its importers only (render, cli): scan itself imports no floor but SCAN_ALLOWED
    "cli": 6, "pytest_plugin": 6, "__main__": 6,
}
SCAN_ALLOWED = {"errors", "fileio", "scan", "__version__", ""}
RECIPE_TOP_FLOOR = 2  # the highest floor of detaudit a recipe may import (env: determinism)


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of both packages (a package is its __init__)."""
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            if "site" in rel.parts or "probes" in rel.parts:
                continue  # scripts run in recipe processes, never imported by the tool
            out[".".join(rel.parts).removesuffix(".__init__")] = path
    return out


def _absolute(node: ast.ImportFrom, module: str, path: Path) -> str | None:
    """The module a `from X import ...` names, relative imports resolved against ``module``."""
    if node.level == 0:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, modules: frozenset[str]) -> set[str]:
    """The modules of PACKAGES that ``module`` imports anywhere in its file (TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, path)
            if not target or target.split(".")[0] not in PACKAGES:
                continue
            submodules = {f"{target}.{a.name}" for a in node.names} & modules
            found.update(submodules)  # `from pkg import module` imports the module, not the package's names
            if len(submodules) < len(node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
    return found


def _floor(module: str) -> int | None:
    parts = module.split(".") + [""]
    return FLOORS.get(parts[1]) if parts[0] == "detaudit" else None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    names = frozenset(modules)
    return {name: {m for m in _imports(name, path, names) if m in modules and m != name}
            for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per back edge of a depth-first walk: none found means the graph has no circle at all."""
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
    return cycles


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import (``a -> b``) that points above its own floor, or out of scan, or from the tool into recipes/."""
    upward = []
    for name, targets in graph.items():
        parts = name.split(".")
        if parts[0] == "recipes":
            upward += [f"{name} -> {m}" for m in targets
                       if m.startswith("detaudit") and (_floor(m) is None or _floor(m) > RECIPE_TOP_FLOOR)]
            continue
        if len(parts) > 1 and parts[1] == "scan":
            upward += [f"{name} -> {m}" for m in targets
                       if m.split(".")[0] != "detaudit" or (m.split(".") + [""])[1] not in SCAN_ALLOWED]
            continue
        own = _floor(name)
        assert own is not None, f"{name}: a top-level module with no floor (add it to FLOORS)"
        for target in targets:
            floor = _floor(target)
            if target.startswith("recipes") or floor is None or floor > own:
                upward.append(f"{name} -> {target}")
    return sorted(upward)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = _upward(_graph())
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_every_floor_names_a_part_of_the_package() -> None:
    """A floor left behind by a move (``ci`` went under ``render``) would let a new module of that name in unchecked."""
    tops = {name.split(".")[1] for name in _modules() if name.startswith("detaudit.")} | {""}
    assert set(FLOORS) <= tops, f"floors with no module: {sorted(set(FLOORS) - tops)}"


def test_no_import_circle() -> None:
    cycles = _circles(_graph())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_import_reader_sees_what_python_would_import(tmp_path: Path) -> None:
    """The reader the two tests rest on: type-only, function-level and relative imports all count."""
    source = tmp_path / "plan.py"
    source.write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from detaudit.run.executor import Executor\n"
        "def f():\n    from detaudit.data import card\n"
        "from . import spec\nfrom ..env.provenance import runner_class\nimport detaudit.errors\nimport json\n"
    )
    modules = frozenset(_modules())
    assert _imports("detaudit.run.plan", source, modules) == {
        "detaudit.run.executor", "detaudit.data.card", "detaudit.run.spec", "detaudit.env.provenance",
        "detaudit.errors"}
    # In a package's __init__, `from . import` names the package's own modules.
    (tmp_path / "run").mkdir()
    init = tmp_path / "run" / "__init__.py"
    init.write_text("from . import spec\nfrom .plan import finish\n")
    assert _imports("detaudit.run", init, modules) == {"detaudit.run.spec", "detaudit.run.plan"}
    # Both packages are read, the recipe's circle-prone modules among them.
    assert {"recipes.diffusion_nft.config", "recipes.diffusion_nft.algorithms", "detaudit.run.plan"} <= modules


def test_the_checks_catch_a_type_only_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The two checks on a small house: a circle closed by a ``TYPE_CHECKING`` import and an import
    that points up are found; a graph without either passes."""
    modules = frozenset(_modules())
    plan, executor = tmp_path / "plan.py", tmp_path / "executor.py"
    plan.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from detaudit.run.executor import Executor\n")
    executor.write_text("from detaudit.run.plan import plan\nfrom detaudit.data import card\n")
    graph = {"detaudit.run.plan": _imports("detaudit.run.plan", plan, modules),
             "detaudit.run.executor": _imports("detaudit.run.executor", executor, modules), "detaudit.data.card": set()}
    assert _circles(graph) == [["detaudit.run.executor", "detaudit.run.plan", "detaudit.run.executor"]]
    assert _upward(graph) == []
    graph["detaudit.run.plan"] = set()
    assert _circles(graph) == []
    graph["detaudit.data.card"] = {"detaudit.flows.record"}  # data (floor 1) importing a flow (floor 4)
    graph["detaudit.scan.rules"] = {"detaudit.data.card"}  # scan importing the library
    graph["recipes.diffusion_nft.config"] = {"detaudit.run.plan"}  # the recipe importing the tool that runs it
    graph["detaudit.errors"] = {"detaudit"}  # the bottom importing the package's face
    graph["detaudit.run.plan"] = {"recipes.diffusion_nft.config",  # the tool importing the recipe
                                  "detaudit.outputs.page"}  # a folder with no floor yet
    graph["detaudit.env.doctor"] = {"detaudit.scan.rules"}  # the library using the scanner
    assert _upward(graph) == ["detaudit.data.card -> detaudit.flows.record", "detaudit.env.doctor -> detaudit.scan.rules",
                              "detaudit.errors -> detaudit", "detaudit.run.plan -> detaudit.outputs.page",
                              "detaudit.run.plan -> recipes.diffusion_nft.config",
                              "detaudit.scan.rules -> detaudit.data.card",
                              "recipes.diffusion_nft.config -> detaudit.run.plan"]


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md gives each module of detaudit/ one line, under its folder's heading: a
    module added, moved or removed without its line fails here, so the page keeps matching the code."""
    import re

    named, folder = set(), None
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        heading = re.match(r"### `(detaudit/[\w/]*)`$", line)
        if heading:
            folder = heading.group(1)
        elif folder and (item := re.match(r"- `([\w/]+\.py)`: \S", line)):
            named.add(f"{folder}{item.group(1)}")
    on_disk = {str(p.relative_to(REPO)) for p in (REPO / "detaudit").rglob("*.py")}
    assert not on_disk - named, f"modules with no line in docs/architecture.md: {sorted(on_disk - named)}"
    assert not named - on_disk, f"lines for modules that do not exist: {sorted(named - on_disk)}"
