"""scan-rng on the shapes of the reference recipe's layout (issue #23, round three).

The recipe (recipes/diffusion_nft) loads its algorithm with
``importlib.import_module(ALGORITHM_MODULES[name])`` into an annotated local, makes its actors with
``ray.remote(**options)(module.Class)``, and seeds each actor through one helper called with a
role string whose seeding flag is computed from that role. Each tree here has one of those shapes,
written for this test; each test fails when its mechanism is broken by one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scan_tree import by_code, root, write_project  # noqa: F401 (root: a fixture)


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
    """The dict names only the plain module: the shuffle is reached by nothing (unproven)."""
    write_project(root, LOADED_BY_TABLE)
    edit(root / "app/algos/__init__.py", '"shuffle": "app.algos.shuffled"', '"shuffle": "app.algos.plain"')
    edit(root / "app/elsewhere.py", '["app.algos.plain"]', '["app.algos.shuffled"]')
    finding = by_code(".")["return torch.randperm(n)"]
    assert finding.processes == [] and finding.severity == "unproven"


# -- seeding that a helper's parameters switch off -------------------------------------------------

ROLES = {
    "crew/__init__.py": "",
    "crew/common.py": """
        from detaudit.env import determinism


        def setup_process(config, role):
            det = config.determinism
            if det.enabled:
                skip = role == "manager" and not det.seed_manager
                determinism.enable(config.seed, seed_rngs=not skip)
        """,
    "crew/manager.py": """
        import torch

        from crew.common import setup_process


        class Manager:
            def __init__(self, config):
                setup_process(config, "manager")

            def step(self, n):
                return torch.randperm(n)
        """,
    "crew/engine.py": """
        import torch

        from crew.common import setup_process


        class Engine:
            def __init__(self, config):
                setup_process(config, role="engine")

            def step(self, n):
                return torch.randn(n)
        """,
    "crew/drive.py": """
        import ray

        from crew import engine, manager


        def main(config):
            place = {}
            Manager = ray.remote(num_cpus=0, **place)(manager.Manager)
            Engine = ray.remote(num_cpus=0, **place)(engine.Engine)
            m, e = Manager.remote(config), Engine.remote(config)
            return ray.get([m.step.remote(4), e.step.remote(4)])


        if __name__ == "__main__":
            main(None)
        """,
}


def seeding(findings: dict[str, object]) -> dict[str, tuple[str, object]]:
    return {code: (f.severity, [(p["entry"], p["seeded"]) for p in f.processes]) for code, f in findings.items()}


def test_a_seeding_flag_the_config_decides_keeps_the_actor_seeded(root: Path) -> None:
    """seed_rngs = not (role == "manager" and not det.seed_manager): for the manager it depends on
    the config, which the scan cannot know; the seeding stays counted (as a seed under an `if`)."""
    write_project(root, ROLES)
    assert seeding(by_code(".")) == {
        "return torch.randperm(n)": ("warning", [("Manager (Ray actor)", True)]),
        "return torch.randn(n)": ("warning", [("Engine (Ray actor)", True)]),
    }


def test_a_role_that_always_switches_seeding_off_leaves_that_actor_unseeded(root: Path) -> None:
    write_project(root, ROLES)
    edit(root / "crew/common.py", 'skip = role == "manager" and not det.seed_manager', 'skip = role == "manager"')
    assert seeding(by_code(".")) == {
        "return torch.randperm(n)": ("error", [("Manager (Ray actor)", False)]),
        "return torch.randn(n)": ("warning", [("Engine (Ray actor)", True)]),  # role="engine": seeded
    }


def test_a_constant_false_seeding_flag_seeds_nothing(root: Path) -> None:
    write_project(root, ROLES)
    edit(root / "crew/common.py", "seed_rngs=not skip", "seed_rngs=False")
    found = seeding(by_code("."))
    assert found["return torch.randperm(n)"] == ("error", [("Manager (Ray actor)", False)])
    assert found["return torch.randn(n)"] == ("error", [("Engine (Ray actor)", False)])


OWN_HELPER = {
    "solo/__init__.py": "",
    "solo/base.py": """
        import torch


        def seed_all(seed, seed_rngs=True):
            if seed_rngs:
                torch.manual_seed(seed)


        class Seeder:
            def apply(self, seed, seed_rngs=True):
                if seed_rngs:
                    torch.manual_seed(seed)
        """,
    "solo/worker.py": """
        import ray
        import torch

        from solo.base import Seeder, seed_all


        @ray.remote
        class Worker:
            def __init__(self, seed, role):
                seed_all(seed, role != "sampler")

            def step(self, n):
                return torch.rand(n)


        def main():
            return ray.get(Worker.remote(0, "trainer").step.remote(3))


        if __name__ == "__main__":
            main()
        """,
}


@pytest.mark.parametrize(("call", "seeded"), [
    ('seed_all(seed, role != "sampler")', True),  # the role is the caller's parameter: unknown
    ("seed_all(seed, False)", False),
    ("seed_all(seed, seed_rngs=False)", False),
    ("seed_all(seed, seed_rngs=True)", True),
    ("seed_all(seed)", True),
    ("seed_all(seed, None)", False),
    ("seeder = Seeder(); seeder.apply(seed, False)", False),  # a method: positions count past `self`
    ("seeder = Seeder(); seeder.apply(seed, True)", True),
])
def test_a_helper_of_the_tree_seeds_only_where_its_flag_can_be_true(root: Path, call: str, seeded: bool) -> None:
    write_project(root, OWN_HELPER)
    edit(root / "solo/worker.py", 'seed_all(seed, role != "sampler")', call)
    finding = by_code(".")["return torch.rand(n)"]
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Worker (Ray actor)", seeded)]
    assert finding.severity == ("warning" if seeded else "error")


def test_a_constant_carried_through_a_forwarding_call_reaches_the_condition(root: Path) -> None:
    write_project(root, OWN_HELPER)
    edit(root / "solo/worker.py", 'seed_all(seed, role != "sampler")', "setup(seed, False)")
    edit(root / "solo/worker.py", "@ray.remote", "def setup(seed, flag):\n    seed_all(seed, seed_rngs=flag)\n\n\n@ray.remote")
    finding = by_code(".")["return torch.rand(n)"]
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Worker (Ray actor)", False)]
    edit(root / "solo/worker.py", "setup(seed, False)", "setup(seed, True)")
    finding = by_code(".")["return torch.rand(n)"]
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Worker (Ray actor)", True)]


def test_a_parameter_the_function_reassigns_is_unknown(root: Path) -> None:
    """`seed_rngs` is recomputed before the `if`: the False a caller passes is not what it tests."""
    write_project(root, OWN_HELPER)
    edit(root / "solo/worker.py", 'seed_all(seed, role != "sampler")', "seed_all(seed, False)")
    edit(root / "solo/base.py", "def seed_all(seed, seed_rngs=True):\n",
         "def seed_all(seed, seed_rngs=True):\n    if not seed_rngs:\n        seed_rngs = seed is not None\n")
    finding = by_code(".")["return torch.rand(n)"]
    assert [(p["entry"], p["seeded"]) for p in finding.processes] == [("Worker (Ray actor)", True)]


def test_a_seed_right_before_the_draw_is_judged_with_its_arguments(root: Path) -> None:
    """The draw's own function calls the helper first: its constants decide that seeding too."""
    write_project(root, OWN_HELPER)
    edit(root / "solo/worker.py", "        return torch.rand(n)", "        seed_all(n, False)\n        return torch.rand(n)")
    edit(root / "solo/worker.py", 'seed_all(seed, role != "sampler")', "seed_all(seed, False)")
    finding = by_code(".")["return torch.rand(n)"]
    assert finding.severity == "error"
    edit(root / "solo/worker.py", "seed_all(n, False)", "seed_all(n, True)")
    finding = by_code(".")["return torch.rand(n)"]
    assert finding.severity == "warning" and "seeds the torch RNG before it" in finding.note
