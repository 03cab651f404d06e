"""scan-rng on the shapes that made real frameworks noisy (issue #23), one small tree per mechanism.

Each tree is written for this test (none is copied from a framework); each test names the
mechanism it guards and fails when that mechanism is broken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from scan_tree import by_code, entries, root, write_tree  # noqa: F401 (root: a fixture)

from detaudit.scan import ScanConfig, scan

# -- 1. a Ray actor created from a variable ------------------------------------------------------

ACTOR_FROM_VARIABLE = {
    "farm/__init__.py": "",
    "farm/learner.py": """
        import torch


        class Learner:
            def prepare(self, seed):
                torch.manual_seed(seed)

            def sample_batch(self, n):
                return torch.randint(0, n, (4,))
        """,
    "farm/hub.py": """
        import ray


        def spawn(backend, seed):
            if backend == "local":
                from farm.learner import Learner

                chosen = Learner
            else:
                raise ValueError(backend)
            Remote = ray.remote(num_cpus=2)(chosen)
            handle = Remote.remote()
            ray.get(handle.prepare.remote(seed))
            return handle
        """,
}


def test_an_actor_created_from_a_variable_is_an_actor_with_its_own_seeding(root: Path) -> None:
    write_tree(root, ACTOR_FROM_VARIABLE)
    draw = by_code("farm")["return torch.randint(0, n, (4,))"]
    # Recognised as an actor: its prepare() seeds torch, so the draw is a warning in a seeded actor.
    assert entries(draw) == {"Learner (Ray actor)": True} and draw.severity == "warning"


# -- 2. seeding earlier in the same function ---------------------------------------------------

SEED_BEFORE = {
    "deck/__init__.py": "",
    "deck/cards.py": """
        import random

        import torch


        def reseed(seed):
            torch.manual_seed(seed)


        def dealt(cards, seed, round_no):
            random.seed(seed * 31 + round_no)
            hand = list(cards)
            random.shuffle(hand)
            return hand


        def dealt_in_rounds(cards, rounds):
            hands = []
            for r in range(rounds):
                random.seed(r)
                picked = random.sample(cards, 2)
                hands.append(picked)
            return hands


        def noise_after_helper(n):
            reseed(7)
            return torch.rand(n)


        def seeded_only_sometimes(cards, fixed):
            if fixed:
                random.seed(3)
            return random.choice(cards)


        def seeded_too_late(cards):
            top = random.choice(cards)
            random.seed(5)
            return top


        def seeded_inside_a_loop_before(cards, rounds):
            for r in range(rounds):
                random.seed(r)
            return random.choice(list(cards))
        """,
}


def test_a_seed_earlier_in_the_same_function_covers_the_draw(root: Path) -> None:
    write_tree(root, SEED_BEFORE)
    found = by_code("deck")
    for code in ("random.shuffle(hand)", "picked = random.sample(cards, 2)", "return torch.rand(n)"):
        assert found[code].severity == "warning", code
        assert found[code].note.startswith("its function seeds the"), code
    # A seed in a branch, after the draw, or in a loop that may not run covers nothing (no process
    # runs these helpers of a package scanned alone: unproven, not a warning).
    for code in ("return random.choice(cards)", "top = random.choice(cards)", "return random.choice(list(cards))"):
        assert found[code].severity == "unproven", code


# -- 3. entry points other than `if __name__ == "__main__": main()` -----------------------------

ENTRY_FORMS = {
    "absl": """
        import torch
        from absl import app


        def main(argv):
            return torch.randn(2)


        if __name__ == "__main__":
            app.run(main)
        """,
    "fire": """
        import fire
        import torch


        def main(steps=1):
            return torch.randn(2)


        if __name__ == "__main__":
            fire.Fire(main)
        """,
    "click": """
        import click
        import torch


        @click.command()
        @click.option("--steps", default=1)
        def main(steps):
            return torch.randn(2)
        """,
    "typer": """
        import torch
        import typer

        cli = typer.Typer()


        @cli.command()
        def main(steps: int = 1):
            return torch.randn(2)
        """,
    "script": """
        import torch

        from launchkit import start


        def main():
            return torch.randn(2)


        start()
        main()
        """,
}


@pytest.mark.parametrize("form", sorted(ENTRY_FORMS))
def test_other_entry_points_are_processes(root: Path, form: str) -> None:
    write_tree(root, {"tools/run.py": ENTRY_FORMS[form]})
    draw = by_code("tools")["return torch.randn(2)"]
    expected = "__main__ of run" if form == "script" else "tools/run.py:main (command-line entry)"
    assert entries(draw) == {expected: False} and draw.severity == "error"
    # The same entry that seeds first: the draw is reproducible (a warning).
    indent = next(line for line in ENTRY_FORMS[form].splitlines() if "return torch.randn(2)" in line).split("return")[0]
    seeded = ENTRY_FORMS[form].replace(f"{indent}return", f"{indent}torch.manual_seed(0)\n{indent}return")
    write_tree(root, {"tools/run.py": seeded})
    assert by_code("tools")["return torch.randn(2)"].severity == "warning"


PYTEST_TREE = {
    "lab/__init__.py": "",
    "lab/ops.py": """
        import torch


        def perturb_weights(w):
            return w + torch.randn_like(w)
        """,
    "tests/conftest.py": """
        import pytest
        import torch


        @pytest.fixture
        def weights():
            return torch.ones(3)
        """,
    "tests/test_ops.py": """
        import torch

        from lab.ops import perturb_weights


        def test_jitter(weights):
            out = perturb_weights(weights)
            assert out.shape == weights.shape


        def test_own_draw():
            x = torch.rand(3)
            assert float(x.sum()) <= 3.0


        class TestSeeded:
            def setup_method(self):
                torch.manual_seed(11)

            def test_noise(self):
                y = torch.rand(2)
                assert y.shape == (2,)
        """,
    # tests inside the package: their module names start like the pipeline's
    "lab/tests/__init__.py": "",
    "lab/tests/test_inner.py": """
        import torch

        from lab.ops import perturb_weights


        def test_inner():
            base = torch.rand(2)
            assert perturb_weights(base).shape == (2,)
        """,
}


def test_pytest_tests_are_processes_and_warnings_unless_asked(root: Path) -> None:
    write_tree(root, PYTEST_TREE)
    found = by_code("lab", "tests")
    own = found["x = torch.rand(3)"]
    assert entries(own) == {"test_own_draw (pytest test)": False} and own.severity == "warning"
    assert "runs only in tests" in own.note
    seeded = found["y = torch.rand(2)"]  # setup_method seeds the class's tests
    assert entries(seeded) == {"TestSeeded.test_noise (pytest test)": True} and seeded.severity == "warning"
    # Pipeline code that only a test runs: tests are followed through test code only, and no entry
    # of the pipeline is known to run it, so it is unproven (fail closed: shown, counted, not dropped).
    library = found["return w + torch.randn_like(w)"]
    assert library.processes == [] and library.severity == "unproven" and library.note.startswith("no known process")
    strict = by_code("lab", "tests", tests_as_pipeline=True)
    assert strict["x = torch.rand(3)"].severity == "error" and strict["y = torch.rand(2)"].severity == "warning"
    assert entries(strict["return w + torch.randn_like(w)"]) == {"test_jitter (pytest test)": False,
                                                                 "test_inner (pytest test)": False}
    # A script in tests/ is followed everywhere; pipeline code only it runs is still unproven.
    write_tree(root, {"tests/check_ops.py": """
        import torch

        from lab.ops import perturb_weights

        if __name__ == "__main__":
            perturb_weights(torch.ones(2))
        """})
    library = by_code("lab", "tests")["return w + torch.randn_like(w)"]
    assert entries(library) == {"__main__ of check_ops": False} and library.severity == "unproven"
    assert library.note.startswith("no pipeline process")
    cli = run_cli("scan-rng", "tests", "--format", "json", "--no-cache", cwd=root)
    assert cli.code == 0 and {f["severity"] for f in json.loads(cli.out)["findings"]} == {"warning"}
    assert run_cli("scan-rng", "tests", "--tests-as-pipeline", "--no-cache", cwd=root).code == 1


def test_an_autouse_fixture_in_a_conftest_above_seeds_the_tests(root: Path) -> None:
    write_tree(root, PYTEST_TREE)
    write_tree(root, {"tests/conftest.py": """
        import pytest
        import torch


        @pytest.fixture(autouse=True)
        def fixed_seed():
            torch.manual_seed(0)


        @pytest.fixture
        def weights():
            return torch.ones(3)
        """})
    found = by_code("lab", "tests", tests_as_pipeline=True)
    assert entries(found["x = torch.rand(3)"]) == {"test_own_draw (pytest test)": True}
    assert found["x = torch.rand(3)"].severity == "warning"


# -- 4. seeding through library helpers and methods of objects ---------------------------------

SEED_HELPERS = {
    "hf": ("from transformers import set_seed", "set_seed(seed)"),
    "accelerate": ("from accelerate.utils import set_seed", "set_seed(seed)"),
    "lightning": ("import lightning as L", "L.seed_everything(seed)"),
}


@pytest.mark.parametrize("helper", sorted(SEED_HELPERS))
def test_library_seed_helpers_seed_every_family(root: Path, helper: str) -> None:
    imported, call = SEED_HELPERS[helper]
    write_tree(root, {"job/__init__.py": "", "job/worker.py": f"""
        import random

        import numpy as np
        import ray
        import torch
        {imported}


        @ray.remote
        class Worker:
            def __init__(self, seed):
                {call}

            def draw(self):
                return torch.rand(1), np.random.rand(1), random.random()
        """})
    (draw_torch, draw_np, draw_random) = sorted(scan(["job"], ScanConfig(), use_cache=False).findings, key=lambda f: f.rule)
    assert [f.rule for f in (draw_torch, draw_np, draw_random)] == ["DA101", "DA201", "DA301"]
    assert all(f.severity == "warning" and entries(f) == {"Worker (Ray actor)": True}
               for f in (draw_torch, draw_np, draw_random))


STRATEGY = {
    "team/__init__.py": "",
    "team/strategy.py": """
        from accelerate.utils import set_seed


        class DistStrategy:
            def __init__(self, seed):
                self.seed = seed

            def setup_distributed(self):
                set_seed(self.seed)


        def build_strategy(args):
            return DistStrategy(args.seed)
        """,
    "team/actor.py": """
        import ray
        import torch

        from team.strategy import build_strategy


        @ray.remote
        class PolicyActor:
            def __init__(self, args):
                self.strategy = build_strategy(args)
                self.strategy.setup_distributed()

            def explore(self):
                return torch.randn(3)


        @ray.remote
        class LocalActor:
            def __init__(self, args):
                strategy = build_strategy(args)
                strategy.setup_distributed()

            def explore_locally(self):
                return torch.rand(3)
        """,
}


def test_seeding_through_a_method_of_an_object_the_tree_builds(root: Path) -> None:
    write_tree(root, STRATEGY)
    found = by_code("team")
    assert entries(found["return torch.randn(3)"]) == {"PolicyActor (Ray actor)": True}
    assert entries(found["return torch.rand(3)"]) == {"LocalActor (Ray actor)": True}


# -- 5. port and name picks are at most a warning ----------------------------------------------

@pytest.mark.parametrize("line, reason", [
    ('os.environ["MASTER_PORT"] = str(random.randint(20000, 30000))', "it only reaches MASTER_PORT"),
    ("random.shuffle(port_candidates)", "it only picks from port_candidates"),
    ('run_name = "".join(random.choice("abcdef") for _ in range(6))', "it only builds a random name"),
    ("random.shuffle(self_servers)", "it only picks from self_servers"),
    ("dp_rank = int(np.random.choice(ranks)); route(dp_rank=dp_rank)", "it only reaches the argument dp_rank="),
    ("do_print = random.randint(1, 64) == 1\n            if do_print:\n                print(ranks)",
     "it only decides what is printed or logged"),
    ("torch.randn(1).cuda()", "its value is discarded"),
    ("dummy_input = torch.randn(1, 8); dummy_input = None", "its value is never used"),
    ("self_port = random.randint(20000, 30000); time.sleep(0.1); srv.bind(('', self_port))", "it only reaches bind()"),
    ("delay = random.uniform(0, 1); asyncio.sleep(delay)", "it only reaches asyncio.sleep()"),
])
def test_port_and_name_picks_are_at_most_a_warning(root: Path, line: str, reason: str) -> None:
    write_tree(root, {"net/__init__.py": "", "net/boot.py": f"""
        import asyncio
        import os
        import random
        import time

        import numpy as np
        import ray
        import torch


        @ray.remote
        def boot(port_candidates, self_servers, ranks, srv, route):
            {line}
        """})
    (draw,) = by_code("net").values()
    assert draw.severity == "warning" and f"at most a warning: {reason}" in draw.note


def test_a_drawn_value_that_reaches_data_is_still_an_error(root: Path) -> None:
    write_tree(root, {"net/__init__.py": "", "net/boot.py": """
        import random

        import ray


        @ray.remote
        def boot(samples):
            random.shuffle(samples)
            chosen = "".join(random.sample(["a", "b"], 2) + ["c"])
            return samples, chosen
        """})
    assert {f.severity for f in by_code("net").values()} == {"error"}


@pytest.mark.parametrize("lines", [
    "temp = random.uniform(0.5, 1.0)\n            return SamplingParams(temperature=temp)",
    "jitter = random.random() * 0.1\n            return [x + jitter for x in batch]",
    "delay = random.uniform(0, 1)\n            time.sleep(delay)\n            return batch[int(delay * len(batch))]",
    "temp_scale = np.random.uniform(0.9, 1.1)\n            if temp_scale > 1:\n                batch = batch[::-1]\n"
    "            return batch",
    "port = random.randint(20000, 30000)\n            return port + len(batch)",
])
def test_a_value_named_like_a_sink_that_flows_further_is_not_demoted(root: Path, lines: str) -> None:
    """A name alone demotes nothing: `temp`, `jitter`, `delay`, `port` are followed through their uses,
    and one use that is not a sink (a sampling temperature, training data, an `if`, a return) keeps
    the draw an error."""
    write_tree(root, {"net/__init__.py": "", "net/rollout.py": f"""
        import random
        import time

        import numpy as np
        import ray
        from vllm import SamplingParams


        @ray.remote
        def rollout(batch):
            {lines}
        """})
    (draw,) = by_code("net").values()
    assert draw.severity == "error" and "at most a warning" not in draw.note, draw.note


def test_a_value_named_like_a_port_returned_as_it_is_is_unproven(root: Path) -> None:
    """Only its name says a returned `port` is inert, and where it goes next is not followed: unproven."""
    write_tree(root, {"net/__init__.py": "", "net/rollout.py": """
        import random

        import ray


        @ray.remote
        def rollout(batch):
            port = random.randint(20000, 30000)
            return port
        """})
    (draw,) = by_code("net").values()
    assert draw.severity == "unproven" and ("only its name says it is inert: port; it flows on into the return of "
                                            "rollout(), which is not followed") in draw.note


# -- 6. seeds taken from the clock or OS entropy -------------------------------------------------

@pytest.mark.parametrize("seeding", [
    "random.seed()",
    "np.random.seed(None)",
    "torch.manual_seed(time.time_ns())",
    "stamp = int(time.time())\n                torch.manual_seed(stamp)",
    "torch.seed()",
])
def test_entropy_seeds_are_findings_and_not_seeding(root: Path, seeding: str) -> None:
    write_tree(root, {"clock/__init__.py": "", "clock/actor.py": f"""
        import random
        import time

        import numpy as np
        import ray
        import torch


        @ray.remote
        class Sampler:
            def __init__(self):
                {seeding}

            def sample(self):
                return torch.rand(1), np.random.rand(1), random.random()
        """})
    findings = scan(["clock"], ScanConfig(), use_cache=False).findings
    entropy = [f for f in findings if f.rule == "DA303"]
    assert len(entropy) == 1 and entropy[0].severity == "error"
    # Nothing was seeded: every draw of the actor is an error.
    draws = [f for f in findings if f.rule != "DA303"]
    assert len(draws) == 3 and all(f.severity == "error" and entries(f) == {"Sampler (Ray actor)": False}
                                   for f in draws)


# -- 7. "reached via": the attribute that really leads there, every candidate -------------------

VIA = {
    "svc/__init__.py": "",
    "svc/loading.py": """
        import importlib


        def load_function(path):
            module, _, name = path.rpartition(".")
            return getattr(importlib.import_module(module), name)
        """,
    "svc/options.py": """
        import argparse


        def parse():
            parser = argparse.ArgumentParser()
            parser.add_argument("--scorer-path", default="svc.scorers.score_a")
            parser.add_argument("--mixer-path", default="svc.mixers.mix_a")
            args = parser.parse_args()
            if args.variant == "b":
                args.mixer_path = "svc.mixers.mix_b"
            elif args.variant == "c":
                args.mixer_path = "svc.mixers.mix_c"
            elif args.variant == "d":
                args.mixer_path = "svc.mixers.mix_d"
            elif args.variant == "e":
                args.mixer_path = "svc.mixers.mix_e"
            return args
        """,
    "svc/scorers.py": """
        def score_a(x):
            return x
        """,
    "svc/mixers.py": """
        import torch


        def mix_a(x):
            return x


        def mix_b(x):
            return x


        def mix_c(x):
            return x


        def mix_d(x):
            return x


        def mix_e(x):
            return x[torch.randperm(len(x))]
        """,
    "svc/actor.py": """
        import ray

        from svc.loading import load_function


        @ray.remote
        class Blender:
            def __init__(self, args):
                self.score = load_function(args.scorer_path)
                self.mix = load_function(args.mixer_path)

            def run(self, x):
                return self.mix(self.score(x))
        """,
}


def test_via_names_the_attribute_that_leads_there_with_every_candidate(root: Path) -> None:
    write_tree(root, VIA)
    draw = by_code("svc")["return x[torch.randperm(len(x))]"]
    candidates = ", ".join(f"svc.mixers.mix_{c}" for c in "abcde")
    assert draw.via == [f"reached via load_function(args.mixer_path): candidates {candidates}"]
    sarif = json.loads(run_cli("scan-rng", "svc", "--format", "sarif", "--no-cache", cwd=root).out)
    (result,) = sarif["runs"][0]["results"]
    assert result["properties"]["via"] == draw.via and "svc.mixers.mix_e" in result["message"]["text"]
    text = run_cli("scan-rng", "svc", "--no-cache", cwd=root).out
    assert "candidates svc.mixers.mix_a, svc.mixers.mix_b, svc.mixers.mix_c, svc.mixers.mix_d and 1 more" in text


# -- how calls are followed (what made real draws "no known process") ---------------------------

REACH = {
    "rl/__init__.py": "",
    "rl/losses.py": """
        import torch


        def plain_loss(x):
            return x.mean()


        def shuffled_loss(x):
            return x[torch.randperm(len(x))].mean()


        LOSSES = {"plain": plain_loss, "shuffled": shuffled_loss}
        """,
    "rl/data.py": """
        import random


        class Stream:
            def __init__(self, items):
                self.items = items

            def __iter__(self):
                order = list(self.items)
                random.shuffle(order)
                return iter(order)
        """,
    "rl/trainer.py": """
        import numpy as np

        import rl.losses
        from rl.data import Stream


        class Trainer:
            def fit(self, n):
                return np.random.permutation(n)


        def loss_for(name):
            return rl.losses.LOSSES[name]


        def run(cfg):
            trainer = Trainer()
            trainer.fit(cfg.n)
            loss = getattr(rl.losses, "plain_loss")
            pick = rl.losses.LOSSES[cfg.loss]
            for item in Stream(cfg.items):
                pick(loss(item))


        if __name__ == "__main__":
            run(None)
        """,
}


def test_registries_getattr_objects_and_protocol_methods_are_followed(root: Path) -> None:
    write_tree(root, REACH)
    found = by_code("rl")
    main = {"__main__ of rl.trainer": False}
    assert entries(found["return x[torch.randperm(len(x))].mean()"]) == main  # LOSSES[cfg.loss](...)
    assert entries(found["return np.random.permutation(n)"]) == main  # trainer = Trainer(); trainer.fit()
    assert entries(found["random.shuffle(order)"]) == main  # for item in Stream(...): Stream.__iter__


def test_imports_through_folders_without_init_are_followed(root: Path) -> None:
    # PEP 420 namespace packages: flowkit/ and flowkit/patches/ have no __init__.py
    write_tree(root, {
        "flowkit/patches/noise.py": """
            import torch


            def perturb(x):
                return x + torch.randn_like(x)
            """,
        "scripts/train.py": """
            from flowkit.patches.noise import perturb


            def main():
                return perturb(1.0)


            if __name__ == "__main__":
                main()
            """,
    })
    draw = by_code("flowkit", "scripts")["return x + torch.randn_like(x)"]
    assert entries(draw) == {"__main__ of train": False}


def test_a_name_bound_to_two_loaded_functions_reaches_both(root: Path) -> None:
    write_tree(root, VIA)
    write_tree(root, {"svc/actor.py": """
        import ray

        from svc.loading import load_function


        @ray.remote
        class Blender:
            def __init__(self, args):
                if args.fast:
                    self.mix = load_function(args.scorer_path)
                else:
                    self.mix = load_function(args.mixer_path)

            def run(self, x):
                return self.mix(x)
        """})
    draw = by_code("svc")["return x[torch.randperm(len(x))]"]
    assert entries(draw) == {"Blender (Ray actor)": False}
    assert draw.via == ["reached via load_function(args.mixer_path): candidates "
                        + ", ".join(f"svc.mixers.mix_{c}" for c in "abcde")]


# -- code that never runs: what follows a raise / return / break / continue in its block ----------

DEAD_AFTER_RAISE = {
    "sampler/__init__.py": "",
    "sampler/main.py": """
        import torch


        def act(use_noise, steps):
            if use_noise:
                raise ValueError("noise sampling was removed")
                noise = torch.randn(steps)
            for step in range(steps):
                if step > 1:
                    break
                    torch.rand(1)
                continue
                torch.randint(0, 2, (1,))
            return torch.zeros(steps)
            torch.rand(steps)


        def other():
            return torch.randperm(4)


        if __name__ == "__main__":
            act(False, 3)
            print(other())
        """,
}


def test_draws_after_a_block_ends_are_not_draws(root: Path) -> None:
    write_tree(root, DEAD_AFTER_RAISE)
    found = by_code(".")
    # only the live draw: the four after raise / break / continue / return never run
    assert sorted(found) == ["return torch.randperm(4)"]
    assert found["return torch.randperm(4)"].severity == "error"
