"""scan-rng on the shapes of the reference recipe's layout (issue #23, round three).

The recipe (recipes/diffusion_nft) loads its algorithm with
``importlib.import_module(ALGORITHM_MODULES[name])`` into an annotated local, makes its actors with
``ray.remote(**options)(module.Class)``, and seeds each actor through one helper called with a
role string whose seeding flag is computed from that role. Each tree here has one of those shapes,
written for this test; each test fails when its mechanism is broken by one line.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from detaudit.scan import ScanConfig, scan


def write_project(root: Path, files: dict[str, str]) -> None:
    files = {"pyproject.toml": '[project]\nname = "demo"\n', **files}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def by_code(*paths: str, **config) -> dict[str, object]:
    result = scan(list(paths), ScanConfig(**config), use_cache=False)
    return {f.code: f for f in result.findings}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- a module loaded by a lookup in a dict of dotted paths ------------------------------------------

LOADED_BY_TABLE = {
    "app/__init__.py": "",
    "app/algos/__init__.py": """
        from typing import Protocol

        MODULES = {
            "shuffle": "app.algos.shuffled",
            "plain": "app.algos.plain",
        }


        class Algo(Protocol):
            def prepare(self, n: int): ...
        """,
    "app/algos/shuffled.py": """
        import torch


        def prepare(n):
            return torch.randperm(n)
        """,
    "app/algos/plain.py": """
        def prepare(n):
            return list(range(n))
        """,
    "app/elsewhere.py": """
        # a dotted string assigned to no attribute: not one of MODULES
        KNOWN = ["app.algos.plain"]
        """,
    "app/manager.py": """
        import importlib

        import torch

        from app.algos import MODULES, Algo


        class Manager:
            def __init__(self, seed):
                torch.manual_seed(seed)

            def step(self, name, n):
                algo: Algo = importlib.import_module(MODULES[name])
                return algo.prepare(n)
        """,
    "app/drive.py": """
        import ray

        from app import manager


        def main():
            actor = ray.remote(num_cpus=0)(manager.Manager).remote(0)
            return ray.get(actor.step.remote("shuffle", 4))


        if __name__ == "__main__":
            main()
        """,
}


def test_a_module_loaded_from_a_dict_of_dotted_paths_is_reached(root: Path) -> None:
    write_project(root, LOADED_BY_TABLE)
    finding = by_code(".")["return torch.randperm(n)"]
    assert finding.severity == "warning"
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Manager (Ray actor)", True)]
    (via,) = finding.via
    assert via == ("reached via importlib.import_module(MODULES[name]): "
                   "candidates app.algos.plain.prepare, app.algos.shuffled.prepare")


@pytest.mark.parametrize("lookup", ["MODULES.get(name)", "MODULES[name.lower()]"])
def test_get_and_computed_keys_name_the_same_dict(root: Path, lookup: str) -> None:
    write_project(root, LOADED_BY_TABLE)
    edit(root / "app/manager.py", "MODULES[name]", lookup)
    finding = by_code(".")["return torch.randperm(n)"]
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Manager (Ray actor)", True)]
    assert "candidates app.algos.plain.prepare, app.algos.shuffled.prepare" in finding.via[0]


def test_a_dict_of_other_strings_reaches_only_its_own(root: Path) -> None:
    """The dict names only the plain module: the shuffle is reached by nothing (an error)."""
    write_project(root, LOADED_BY_TABLE)
    edit(root / "app/algos/__init__.py", '"shuffle": "app.algos.shuffled"', '"shuffle": "app.algos.plain"')
    edit(root / "app/elsewhere.py", '["app.algos.plain"]', '["app.algos.shuffled"]')
    finding = by_code(".")["return torch.randperm(n)"]
    assert finding.processes == [] and finding.severity == "error"
