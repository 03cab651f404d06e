"""scan-rng on code no pipeline process is seen to run, and on the calls that reach it (issue #23, round two).

Each tree is a whole project (a pyproject.toml at its root), written for this test: Ray actor
methods are entries when the tree names them, registries and factories are followed, and a draw
no pipeline process runs is judged by whether a pipeline process imports its module and whether
code other than tests names its function. Each test fails when its mechanism is broken.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli
from scan_tree import by_code, entries, root, write_project  # noqa: F401 (root: a fixture)

from detaudit.scan import ScanConfig, scan


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- 1. Ray actor methods are entries when the tree names them ------------------------------------

ACTOR = {
    "farm/__init__.py": "",
    "farm/worker.py": """
        import ray
        import torch


        @ray.remote
        class Worker:
            def step(self):
                return torch.randn(3)

            def perturb(self):
                return torch.rand(3)

            def reseed(self, seed):
                torch.manual_seed(seed)
        """,
    "farm/drive.py": """
        import ray

        from farm.worker import Worker


        def drive(kind):
            worker = Worker.remote()
            return ray.get(worker.step.remote())
        """,
    "train.py": """
        from farm.drive import drive

        if __name__ == "__main__":
            drive("step")
        """,
    "tests/test_worker.py": """
        import ray

        from farm.worker import Worker


        def test_perturb_moves_the_weights():
            worker = Worker.remote()
            assert ray.get(worker.perturb.remote()) is not None
        """,
}


def test_an_actor_method_only_tests_name_is_no_entry(root: Path) -> None:
    write_project(root, ACTOR)
    found = by_code(".")
    step = found["return torch.randn(3)"]
    assert step.severity == "error" and entries(step) == {"Worker (Ray actor)": False}
    perturb = found["return torch.rand(3)"]
    assert perturb.severity == "warning" and perturb.processes == []
    assert perturb.note == ("no known process: nothing outside tests names perturb, which only a call by that "
                            "name can run")
    # reseed() seeds torch, but nothing names it: it seeds no process
    assert entries(step) == {"Worker (Ray actor)": False}


@pytest.mark.parametrize(("call", "named"), [
    ('ray.get(worker.perturb.remote())', True),  # named as an attribute
    ('ray.get(getattr(worker, "perturb").remote())', True),  # named by a string
    ('ray.get(getattr(worker, f"pert{kind}").remote())', True),  # a name built at run time that can be it
    ('ray.get(getattr(worker, f"run_{kind}").remote())', False),  # one that cannot
    ('[getattr(worker, name) for name in dir(worker)]', True),  # every name: fail closed
], ids=["attribute", "string", "built-match", "built-other", "dir"])
def test_a_named_or_built_method_name_makes_an_entry(root: Path, call: str, named: bool) -> None:
    write_project(root, ACTOR)
    edit(root / "farm" / "drive.py", "    return ray.get(worker.step.remote())\n",
         f"    {call}\n    return ray.get(worker.step.remote())\n")
    perturb = by_code(".")["return torch.rand(3)"]
    if named:  # an entry of the actor (seeded only when the dir() loop names reseed too)
        assert entries(perturb) == {"Worker (Ray actor)": call.startswith("[")}
        assert perturb.severity == ("warning" if call.startswith("[") else "error")
    else:
        assert perturb.severity == "warning" and perturb.processes == []


def test_names_built_on_one_class_name_only_its_methods(root: Path) -> None:
    """``getattr(self, name)`` over ``dir(self)`` in another class can name only that class's methods."""
    write_project(root, {**ACTOR, "farm/hooks.py": """
        class Hooks:
            def run_all(self):
                return [getattr(self, name)() for name in dir(self) if name.startswith("on_")]
        """})
    assert by_code(".")["return torch.rand(3)"].processes == []


def test_an_actor_of_test_code_keeps_every_method(root: Path) -> None:
    write_project(root, {**ACTOR, "tests/test_helper.py": """
        import ray
        import torch


        @ray.remote
        class Helper:
            def sample(self):
                return torch.rand(4)


        def test_sample():
            assert ray.get(Helper.remote().sample.remote()) is not None
        """})
    sample = by_code(".")["return torch.rand(4)"]
    assert sample.severity == "warning" and entries(sample) == {"Helper (Ray actor)": False}


def test_only_a_named_method_seeds_the_actor(root: Path) -> None:
    write_project(root, ACTOR)
    edit(root / "farm" / "drive.py", "    return ray.get(worker.step.remote())\n",
         "    ray.get(worker.reseed.remote(0))\n    return ray.get(worker.step.remote())\n")
    step = by_code(".")["return torch.randn(3)"]
    assert step.severity == "warning" and entries(step) == {"Worker (Ray actor)": True}


def test_every_method_is_an_entry_of_an_actor_with_a_library_base(root: Path) -> None:
    write_project(root, ACTOR)
    edit(root / "farm" / "worker.py", "@ray.remote\nclass Worker:\n",
         "from vllm import WorkerBase\n\n\n@ray.remote\nclass Worker(WorkerBase):\n")
    perturb = by_code(".")["return torch.rand(3)"]  # an entry; reseed() too, so the actor is seeded
    assert entries(perturb) == {"Worker (Ray actor)": True} and perturb.severity == "warning"


def test_a_package_scanned_alone_keeps_every_method_an_entry(root: Path) -> None:
    """The package alone is not a whole project: its driver may be elsewhere, so nothing is left out."""
    write_project(root, ACTOR)
    perturb = by_code("farm")["return torch.rand(3)"]
    assert entries(perturb) == {"Worker (Ray actor)": True} and perturb.severity == "warning"


# -- 2. registries and factories -------------------------------------------------------------------

REGISTRY = {
    "losses/__init__.py": "",
    "losses/registry.py": """
        import torch

        LOSSES = {}


        def register_loss(name):
            def decorator(fn):
                LOSSES[name] = fn
                return fn

            return decorator


        def get_loss(name):
            return LOSSES[name]


        @register_loss("plain")
        def plain(x):
            return x


        @register_loss("noisy")
        def noisy(x):
            return x + torch.randn(x.shape)
        """,
    "losses/actor.py": """
        import ray

        from losses.registry import get_loss


        @ray.remote
        class Learner:
            def update(self, x, mode):
                loss_fn = get_loss(mode)
                return loss_fn(x)
        """,
    "train.py": """
        import ray

        from losses.actor import Learner

        if __name__ == "__main__":
            learner = Learner.remote()
            ray.get(learner.update.remote(1.0, "noisy"))
        """,
}


@pytest.mark.parametrize("lookup", ["loss_fn = get_loss(mode)\n                return loss_fn(x)",
                                    "return get_loss(mode)(x)"], ids=["bound", "called"])
def test_a_function_a_decorator_registers_is_reached_through_the_lookup(root: Path, lookup: str) -> None:
    REGISTRY_FORM = dict(REGISTRY)
    REGISTRY_FORM["losses/actor.py"] = REGISTRY["losses/actor.py"].replace(
        "loss_fn = get_loss(mode)\n                return loss_fn(x)", lookup)
    write_project(root, REGISTRY_FORM)
    noisy = by_code(".")["return x + torch.randn(x.shape)"]
    assert noisy.severity == "error" and entries(noisy) == {"Learner (Ray actor)": False}
    assert noisy.note == "runs in Learner (Ray actor), which does not seed the torch RNG before it"


PACKERS = {
    "pack/__init__.py": "",
    "pack/algorithms.py": """
        import random


        class Packer:
            def pack(self, sizes):
                return list(sizes)


        class ShufflePacker:
            def pack(self, sizes):
                order = list(sizes)
                random.shuffle(order)
                return order


        def get_packer(name):
            packers = {"plain": Packer, "shuffle": ShufflePacker}
            return packers[name]()
        """,
    "pack/run.py": """
        from pack.algorithms import get_packer

        if __name__ == "__main__":
            packer = get_packer("shuffle")
            print(packer.pack([3, 1, 2]))
        """,
}


def test_a_factory_of_a_table_of_classes_gives_their_methods(root: Path) -> None:
    write_project(root, PACKERS)
    shuffle = by_code(".")["random.shuffle(order)"]
    assert shuffle.severity == "error" and entries(shuffle) == {"__main__ of pack.run": False}


TEMPLATE = {
    "pack/__init__.py": "",
    "pack/algorithms.py": """
        import random


        class Packer:
            def pack(self, sizes):
                return self.order(sizes)

            def order(self, sizes):
                return list(sizes)


        class ShufflePacker(Packer):
            def order(self, sizes):
                order = list(sizes)
                random.shuffle(order)
                return order
        """,
    "pack/run.py": """
        from pack.algorithms import ShufflePacker

        if __name__ == "__main__":
            print(ShufflePacker().pack([3, 1, 2]))
        """,
}


def test_self_calls_reach_the_overrides_of_subclasses(root: Path) -> None:
    write_project(root, TEMPLATE)
    shuffle = by_code(".")["random.shuffle(order)"]
    assert shuffle.severity == "error" and entries(shuffle) == {"__main__ of pack.run": False}


# -- 3. a draw no pipeline process runs ------------------------------------------------------------

UNREACHED = {
    "app/__init__.py": "",
    "app/train.py": """
        from app import steps

        if __name__ == "__main__":
            steps.run()
        """,
    "app/steps.py": """
        import torch

        from app import deep

        HOOKS = [lambda: None]


        def run():
            return sum(hook() or 0 for hook in HOOKS)


        def on_step():
            return torch.rand(2)


        def only_tested():
            return torch.rand(3)


        HANDLERS = {"step": on_step}
        """,
    "app/deep.py": """
        import torch


        def warm(n):
            return torch.rand(n)


        WARMERS = [warm]
        """,
    "app/orphan.py": """
        import torch


        def unused(n):
            return torch.rand(n)


        TABLE = [unused]
        """,
    "tests/test_steps.py": """
        from app.steps import only_tested


        def test_only_tested():
            assert only_tested() is not None
        """,
}


def test_a_draw_in_a_module_no_process_imports_is_a_warning(root: Path) -> None:
    write_project(root, UNREACHED)
    found = by_code(".")
    by_path = {f.path: f for f in scan(["."], ScanConfig(), use_cache=False).findings}  # warm and unused share a line
    orphan = by_path["app/orphan.py"]
    assert orphan.severity == "warning"
    assert orphan.note == "no known process: no process of the scanned tree imports app.orphan"
    # imported by the pipeline (app.deep, through app.steps) and named: it can be called there
    deep = by_path["app/deep.py"]
    assert deep.severity == "unproven" and deep.note.startswith("no known process: cannot show that a seeded process runs")
    assert found["return torch.rand(2)"].severity == "unproven"  # on_step: named by a dict the scan does not follow
    # --unknown-process error: the old strict rule, for every such draw
    strict = {f.path: f for f in scan(["."], ScanConfig(unknown_process="error"), use_cache=False).findings}
    assert strict["app/orphan.py"].severity == "error"
    assert strict["app/orphan.py"].note.startswith("no known process: cannot show that a seeded process runs it")


def test_a_function_only_tests_name_is_a_warning(root: Path) -> None:
    write_project(root, UNREACHED)
    only = by_code(".")["return torch.rand(3)"]
    assert only.severity == "warning"
    assert only.note == "no known process: nothing outside tests names only_tested, which only a call by that name can run"
    assert by_code(".", unknown_process="error")["return torch.rand(3)"].severity == "error"


# A lookup by a name taken from a value, on the function's module: what lets a string call it.
LOOKUP = "from app import steps\n\n\ndef call(cfg):\n    return getattr(steps, cfg.hook)()\n"


@pytest.mark.parametrize(("path", "text", "lookup"), [
    ("conf/run.yaml", "hooks:\n  - only_tested\n", True),  # a config file names it, a lookup can take it
    ("app/extra.py", "NAMES = ['only_tested']\n", True),  # a string names it, a lookup can take it
    ("app/extra.py", "def go(group):\n    return group.run_all('only_tested')\n", False),  # a call is given it
    ("app/extra.py", "def go(group):\n    return group.run_all(method='only_tested')\n", False),  # as a keyword
    ("app/extra.py", "from app.steps import only_tested\n", False),  # code imports it
    ("app/extra.py", "from app import steps\n\n\ndef every():\n    return [getattr(steps, n) for n in dir(steps)]\n",
     False),
], ids=["config", "string", "call-argument", "call-keyword", "import", "module-listed"])
def test_a_function_named_outside_tests_stays_unproven(root: Path, path: str, text: str, lookup: bool) -> None:
    write_project(root, {**UNREACHED, path: text, **({"app/dispatch.py": LOOKUP} if lookup else {})})
    assert by_code(".")["return torch.rand(3)"].severity == "unproven"


@pytest.mark.parametrize("lookup", [
    None,  # nothing looks a name up at run time
    "from app import deep\n\n\ndef call(cfg):\n    return getattr(deep, cfg.hook)()\n",  # another module
    "import torch\n\n\ndef make(cfg):\n    return getattr(torch.optim, cfg.name)\n",  # a library's object
], ids=["no-lookup", "other-module", "library"])
def test_a_string_no_lookup_can_take_calls_nothing(root: Path, lookup: str | None) -> None:
    """`config.prompt_fn = "imagenet_animals"`, compared and never looked up (flow_grpo's prompts)."""
    files = {**UNREACHED, "conf/run.yaml": "hooks:\n  - only_tested\n",
             "app/extra.py": "NAMES = ['only_tested']\n\n\ndef pick(cfg):\n    return cfg.hook == 'only_tested'\n"}
    write_project(root, {**files, **({"app/dispatch.py": lookup} if lookup else {})})
    only = by_code(".")["return torch.rand(3)"]
    assert only.severity == "warning", only.note
    # a lookup on an object the scan cannot place may be on app.steps: the strings count again
    unknown = "def call(obj, cfg):\n    return getattr(obj, cfg.hook)()\n"
    write_project(root, {**files, "app/dispatch.py": unknown})
    assert by_code(".")["return torch.rand(3)"].severity == "unproven"


def test_listing_another_module_names_nothing_here(root: Path) -> None:
    extra = "from app import deep\n\n\ndef every():\n    return [getattr(deep, n) for n in dir(deep)]\n"
    write_project(root, {**UNREACHED, "app/extra.py": extra})
    assert by_code(".")["return torch.rand(3)"].severity == "warning"


@pytest.mark.parametrize(("old", "new"), [
    ("def only_tested():", "@app_registry.register\ndef only_tested():"),  # a decorator may register it
    ("def only_tested():", "class Probe(torch.nn.Module):\n    def only_tested(self):"),  # a library base may call it
], ids=["decorated", "library-base"])
def test_what_more_than_a_name_can_call_stays_unproven(root: Path, old: str, new: str) -> None:
    write_project(root, UNREACHED)
    steps = root / "app" / "steps.py"
    edit(steps, old, new)
    if "Probe" in new:
        edit(steps, "    return torch.rand(3)\n", "        return torch.rand(3)\n")
    assert by_code(".")["return torch.rand(3)"].severity == "unproven"


def test_a_module_a_dotted_path_names_may_be_loaded(root: Path) -> None:
    """A loader can take a path from a config file or launch script: its module counts as imported."""
    write_project(root, {**UNREACHED, "scripts/run.sh": "python -m app.train --hook app.orphan.unused\n"})
    result = scan(["."], ScanConfig(), use_cache=False)
    assert {f.path: f for f in result.findings}["app/orphan.py"].severity == "unproven"


def test_a_package_scanned_alone_keeps_unreached_draws_unproven(root: Path) -> None:
    write_project(root, UNREACHED)
    result = scan(["app"], ScanConfig(), use_cache=False)
    found = {f.path: f for f in result.findings}
    assert found["app/orphan.py"].severity == "unproven"
    assert {f.code: f for f in result.findings}["return torch.rand(3)"].severity == "unproven"


def test_cli_unknown_process_choices(root: Path) -> None:
    write_project(root, {"app/__init__.py": "", "app/orphan.py": UNREACHED["app/orphan.py"]})
    default = run_cli("scan-rng", ".", "--no-cache", "--format", "json", cwd=root)
    assert default.code == 0, default.text
    assert [f["severity"] for f in json.loads(default.out)["findings"]] == ["warning"]
    strict = run_cli("scan-rng", ".", "--no-cache", "--unknown-process", "error", cwd=root)
    assert strict.code == 1 and "error DA101" in strict.out


# -- a helper only dead functions call is dead too (flow_grpo's prompts.from_file) ------------------

PROMPTS = {
    "app/__init__.py": "",
    "app/prompts.py": """
        import random


        def from_file(path):
            return random.choice(open(path).read().split())


        def animals():
            return from_file("animals.txt")


        def colours():
            return from_file("colours.txt")
        """,
    "app/config.py": "PROMPT_FN = 'animals'\n",
    "train.py": """
        from app import config, prompts

        if __name__ == "__main__":
            print(config.PROMPT_FN, prompts.__name__)
        """,
}


def test_a_helper_only_dead_functions_call_is_a_warning(root: Path) -> None:
    write_project(root, PROMPTS)
    helper = by_code(".")["return random.choice(open(path).read().split())"]
    assert helper.severity == "warning", helper.note
    assert helper.note == ("no known process: only animals, colours of its own module use from_file, and nothing "
                           "outside tests can call them; only a call by name can run it")


@pytest.mark.parametrize(("path", "text"), [
    ("app/prompts.py", "\n\nDEFAULT = colours()\n"),  # module-level code calls a caller: it runs on import
    ("app/use.py", "from app.prompts import animals\n\n\ndef go():\n    return animals()\n"),  # another module names it
    ("app/prompts.py", "\n\nclass Table:\n    pick = staticmethod(animals)\n"),  # a class body names it
    ("app/prompts.py", "\n\ndef everything():\n    return animals()\n\n\nALL = [everything]\n"),  # live through a chain
], ids=["module-level", "imported", "class-body", "chain"])
def test_a_helper_a_live_caller_uses_stays_unproven(root: Path, path: str, text: str) -> None:
    files = dict(PROMPTS)
    files[path] = (textwrap.dedent(files[path]) if path in files else "") + text
    write_project(root, files)
    helper = by_code(".")["return random.choice(open(path).read().split())"]
    assert helper.severity == "unproven", helper.note


def test_calls_among_dead_functions_alone_keep_them_dead(root: Path) -> None:
    """from_file and animals call each other; nothing else calls either."""
    files = dict(PROMPTS)
    files["app/prompts.py"] += """
        def again(path):
            return animals() if path else from_file(path)
        """
    files["app/prompts.py"] = files["app/prompts.py"].replace('return from_file("animals.txt")', 'return again("animals.txt")')
    write_project(root, files)
    assert by_code(".")["return random.choice(open(path).read().split())"].severity == "warning"


@pytest.mark.parametrize(("path", "text"), [
    ("conf/prompts.yaml", "prompt:\n  _target_: app.prompts.animals\n"),  # Hydra: hydra.utils.call(cfg.prompt)
    ("pyproject.toml", '[project]\nname = "demo"\n[project.entry-points."demo.prompts"]\nanimals = "app.prompts:animals"\n'),
    ("app/pick.py", "from app import prompts\n\n\ndef pick(name):\n    return prompts.__dict__[name]()\n"),
    ("app/prompts.py", "\n\nimport sys\nimport inspect\n\nALL = inspect.getmembers(sys.modules[__name__])\n"),
    ("app/prompts.py", "\n\nALL = vars()\n"),
], ids=["hydra-target", "entry-point", "module-dict", "getmembers", "vars"])
def test_a_caller_reached_by_a_dotted_path_or_a_listing_stays_live(root: Path, path: str, text: str) -> None:
    files = dict(PROMPTS)
    files[path] = (textwrap.dedent(files[path]) + text) if path in files and path.endswith(".py") else text
    write_project(root, files)
    helper = by_code(".")["return random.choice(open(path).read().split())"]
    assert helper.severity == "unproven", helper.note


def test_a_long_chain_of_dead_helpers_is_judged_without_recursion(root: Path) -> None:
    chain = ["import random\n"]
    chain += [f"\n\ndef f{i}():\n    return f{i + 1}()\n" for i in range(600)]
    chain.append("\n\ndef f600():\n    return random.random()\n")
    write_project(root, {"app/__init__.py": "", "app/chain.py": "".join(chain),
                         "train.py": "import app.chain\n\nif __name__ == '__main__':\n    print(app.chain.__name__)\n"})
    found = by_code(".")["return random.random()"]
    assert found.severity == "warning" and "only f599 of its own module use f600" in found.note, found.note


def test_listing_an_object_the_scan_cannot_place_names_nothing(root: Path) -> None:
    """`vars(args)` lists a namespace, not the tree's code (NeMo-RL's test-only actor methods stayed
    entries when it counted)."""
    write_project(root, {**UNREACHED, "app/cli.py": "def dump(args):\n    return sorted(vars(args)), args.__dict__\n"})
    assert by_code(".")["return torch.rand(3)"].severity == "warning"


def test_a_helper_a_method_uses_stays_live(root: Path) -> None:
    """A plain class handed to a library (an env a vector wrapper steps) has methods no code of the
    tree names: the helpers they use stay unproven."""
    files = dict(PROMPTS)
    files["app/prompts.py"] += """

        class GridEnv:
            def reset(self):
                return from_file("start.txt")
        """
    files["app/config.py"] = "import gymnasium\n\nfrom app.prompts import GridEnv\n\nENVS = gymnasium.vector.SyncVectorEnv([lambda: GridEnv()])\n"
    write_project(root, files)
    assert by_code(".")["return random.choice(open(path).read().split())"].severity == "unproven"


def test_a_method_of_a_decorated_class_is_not_only_called_by_name(root: Path) -> None:
    files = dict(PROMPTS)
    files["app/prompts.py"] += """

        REGISTRY = {}


        def register(cls):
            REGISTRY[cls.__name__] = cls
            return cls


        @register
        class Curriculum:
            def on_epoch_start(self, epoch):
                return random.random()
        """
    write_project(root, files)
    assert by_code(".")["return random.random()"].severity == "unproven"


def test_a_config_word_names_a_function_only_as_a_whole_word(root: Path) -> None:
    """`only_tested_v2` in a config names no `only_tested` (the word search stops at identifier characters)."""
    write_project(root, {**UNREACHED, "conf/run.yaml": "hooks:\n  - only_tested_v2\n", "app/dispatch.py": LOOKUP})
    assert by_code(".")["return torch.rand(3)"].severity == "warning"


@pytest.mark.parametrize(("text", "loaded"), [
    ("hook: app.orphan.unused\n", True),
    ("app.orphan.unused: 1\n", True),  # at the very start of the file
    ("hook: plugins/app.orphan.unused\n", False),  # a file path, not a dotted name
    ("hook: x.app.orphan.unused\n", False),  # another name, that ends like it
], ids=["value", "file-start", "after-slash", "longer-name"])
def test_a_config_file_names_a_module_by_a_whole_dotted_word(root: Path, text: str, loaded: bool) -> None:
    """Only a dotted word that starts the name (no letter, digit, `_`, `.` or `/` before it) names a
    module a loader may take."""
    write_project(root, {**UNREACHED, "conf/run.yaml": text})
    result = scan(["."], ScanConfig(), use_cache=False)
    assert {f.path: f for f in result.findings}["app/orphan.py"].severity == ("unproven" if loaded else "warning")
