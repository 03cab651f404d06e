"""scan-rng call paths and rules on small trees: dispatch forms, hooks, suppressions, impact, --explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from scan_tree import root, write_tree  # noqa: F401 (root: a fixture)

from detaudit.scan import ScanConfig, scan
from detaudit.render.scan import rules_table
from detaudit.scan.rules import RULE_LIST


def findings(*paths: str) -> dict[tuple[str, int], object]:
    return {(f.path, f.line): f for f in scan(list(paths), ScanConfig(), use_cache=False).findings}


DRAW = """
import torch


def convert(n):
    return torch.randperm(n)
"""


@pytest.mark.parametrize("loader_code", [
    # pydoc.locate, bound on self, called in another method
    """
    import pydoc
    import ray

    @ray.remote
    class Manager:
        def __init__(self):
            self.fn = pydoc.locate(CONVERTER)

        def run(self):
            return self.fn(3)

    CONVERTER = "lib.conv.convert"
    """,
    # import_module(...).attr, called at once
    """
    import importlib
    import ray

    @ray.remote
    def manager():
        return importlib.import_module("lib.conv").convert(3)
    """,
    # a local module object from import_module, then an attribute call
    """
    import importlib
    import ray

    @ray.remote
    def manager():
        module = importlib.import_module("lib.conv")
        return module.convert(3)
    """,
    # a Hydra-style _target_ in a config dict, instantiated
    """
    import ray
    from hydra.utils import instantiate

    CONFIG = {"_target_": "lib.conv:convert", "n": 3}

    @ray.remote
    def manager():
        return instantiate(CONFIG)
    """,
    # a project loader (import_module + getattr) behind a wrapper that returns it, called at once
    """
    import importlib
    import ray

    def load(path):
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def load_checked(path):
        return load(path)

    @ray.remote
    def manager(path="lib.conv.convert"):
        return load_checked(path)(3)
    """,
], ids=["pydoc-locate", "import-module-attr", "import-module-local", "hydra-target", "loader-wrapper"])
def test_dynamic_dispatch_forms(root: Path, loader_code: str) -> None:
    write_tree(root, {"lib/__init__.py": "", "lib/conv.py": DRAW, "lib/driver.py": loader_code})
    draw = findings("lib")[("lib/conv.py", 5)]
    assert draw.severity == "error", draw
    assert [p["seeded"] for p in draw.processes] == [False] and draw.via and "lib.conv.convert" in draw.via[0]


def test_without_a_loader_a_string_is_not_a_call(root: Path) -> None:
    write_tree(root, {"lib/__init__.py": "", "lib/conv.py": DRAW, "lib/driver.py": """
        import ray

        @ray.remote
        def manager(registry):
            name = "lib.conv.convert"
            return registry[name](3)
        """})
    draw = findings("lib")[("lib/conv.py", 5)]
    assert draw.processes == [] and "cannot show that a seeded process runs it" in draw.note


ACTOR = """
import ray
import torch

from lib.seeding import seed_hook


@ray.remote
class Actor:
    def work(self):
        return torch.rand(2)


def start():
    ray.init(runtime_env={"worker_process_setup_hook": seed_hook})
"""


def test_ray_worker_setup_hook_counts_as_seeding(root: Path) -> None:
    seeding = "import torch\n\n\ndef seed_hook():\n    torch.manual_seed(0)\n"
    write_tree(root, {"lib/__init__.py": "", "lib/actor.py": ACTOR, "lib/seeding.py": seeding})
    draw = findings("lib")[("lib/actor.py", 10)]
    assert draw.severity == "warning" and draw.processes[0]["seeded"] is True
    # The same hook given by dotted-path string (as detaudit.env.determinism.ray_runtime_env does).
    actor = root / "lib" / "actor.py"
    actor.write_text(ACTOR.lstrip().replace('{"worker_process_setup_hook": seed_hook}',
                                           '{"worker_process_setup_hook": "lib.seeding.seed_hook"}'))
    assert findings("lib")[("lib/actor.py", 10)].processes[0]["seeded"] is True
    # No hook: the same actor is unseeded.
    actor.write_text(ACTOR.lstrip().replace('runtime_env={"worker_process_setup_hook": seed_hook}', ""))
    draw = findings("lib")[("lib/actor.py", 10)]
    assert draw.severity == "error" and draw.processes[0]["seeded"] is False


def test_suppression_on_the_last_line_of_a_call(root: Path) -> None:
    write_tree(root, {"lib/__init__.py": "", "lib/calls.py": """
        import torch


        def draws(n):
            a = torch.randperm(
                n,
            )  # detaudit: ignore[DA101]
            b = torch.randperm(
                n,  # detaudit: ignore[DA101]
            )
            c = torch.randperm(
                n,
            )  # detaudit: ignore[DA201]
            return a, b, c
        """})
    lines = sorted(line for path, line in findings("lib"))
    assert lines == [8, 11]  # a middle-line comment does not cover the call, nor another rule's


@pytest.mark.parametrize("sink", [
    "time.sleep(random.uniform(0, 1))",
    "sock.bind(('127.0.0.1', 20000 + random.randint(0, 100)))",
    "tmp_name = f'run-{random.randint(0, 9999)}'; tempfile.mkdtemp(prefix=tmp_name)",
    "start_server(port=int(random.random() * 1000))",
    "tempfile.mkdtemp(suffix=str(random.random()))",
])
def test_impact_port_sleep_temp_is_at_most_a_warning(root: Path, sink: str) -> None:
    write_tree(root, {"lib/__init__.py": "", "lib/net.py": f"""
        import random
        import tempfile
        import time

        import ray


        @ray.remote
        def serve(sock, start_server):
            {sink}
        """})
    (draw,) = findings("lib").values()
    assert draw.severity == "warning" and "at most a warning: it only reaches" in draw.note


def test_a_draw_that_reaches_data_stays_an_error(root: Path) -> None:
    write_tree(root, {"lib/__init__.py": "", "lib/net.py": """
        import random

        import ray


        @ray.remote
        def serve(items):
            port = 8000
            random.shuffle(items)
            batch = random.randint(0, port)
            return items, batch
        """})
    assert {f.severity for f in findings("lib").values()} == {"error"}


def test_explain_comes_from_the_registry() -> None:
    result = run_cli("scan-rng", "--explain", "DA101")
    rule = next(r for r in RULE_LIST if r.code == "DA101")
    assert result.code == 0
    for part in (rule.summary, rule.why, rule.fix, rule.example, "RNG family: the process-global torch RNG"):
        assert part in result.out
    bad = run_cli("scan-rng", "--explain", "DA999")
    assert bad.code == 2 and bad.err.startswith("detaudit: error: --explain DA999: unknown rule")
    assert len(bad.err.strip().splitlines()) == 1
    none = run_cli("scan-rng")
    assert none.code == 2 and "give at least one PATH" in none.err


def test_docs_table_and_sarif_rules_come_from_the_registry(root: Path) -> None:
    assert rules_table() in (REPO / "docs" / "scan-rng.md").read_text()
    write_tree(root, {"lib/__init__.py": "", "lib/conv.py": DRAW})
    sarif = json.loads(run_cli("scan-rng", "lib", "--format", "sarif", "--no-cache").out)
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert set(rules) == {r.code for r in RULE_LIST}
    assert rules["DA101"]["help"]["text"].startswith("DA101: ") and rules["DA101"]["properties"]["rngFamily"] == "torch"
