"""scan-rng's three verdicts and what issue #37 added to reach them: seeding followed through annotated
parameters and factories, seed-like calls the scan cannot resolve (unproven), process pools,
draws switched off by their callers' arguments or by a module's eval mode, DA107, the baseline's
fingerprint, and the CI reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_cli
from scan_tree import by_code, entries, root, write_project  # noqa: F401 (root: a fixture)

# -- seeding through an annotated parameter and a factory that returns a local (OpenRLHF's shapes) --

STRATEGY = {
    "rlhf/__init__.py": "",
    "rlhf/strategy.py": """
        import transformers


        class Strategy:
            def __init__(self, seed):
                self.seed = seed

            def setup_distributed(self):
                transformers.set_seed(self.seed)
        """,
    "rlhf/utils.py": """
        def get_strategy(args):
            from rlhf.strategy import Strategy

            strategy = Strategy(seed=args.seed)
            return strategy
        """,
    "rlhf/launcher.py": """
        from rlhf.strategy import Strategy


        class BaseActor:
            def _setup_distributed(self, strategy: Strategy):
                strategy.setup_distributed()
        """,
    "rlhf/actor.py": """
        import ray
        import torch
        from torch.utils.data import DataLoader

        from rlhf.launcher import BaseActor


        @ray.remote
        class PolicyActor(BaseActor):
            def init(self, strategy):
                self._setup_distributed(strategy)

            def train(self, buffer):
                return DataLoader(buffer, batch_size=4, shuffle=True)
        """,
    "rlhf/train.py": """
        import random

        import ray

        from rlhf.actor import PolicyActor
        from rlhf.utils import get_strategy


        def main(args):
            strategy = get_strategy(args)
            strategy.setup_distributed()
            actor = PolicyActor.remote()
            ray.get(actor.init.remote(strategy))
            ray.get(actor.train.remote([]))
            return random.random()


        if __name__ == "__main__":
            main(None)
        """,
}


def test_seeding_through_an_annotated_parameter_and_a_returned_local(root: Path) -> None:
    write_project(root, STRATEGY)
    found = by_code(".")
    loader = found["return DataLoader(buffer, batch_size=4, shuffle=True)"]
    assert entries(loader) == {"PolicyActor (Ray actor)": True} and loader.severity == "warning"
    assert "transformers.set_seed() in Strategy.setup_distributed, rlhf/strategy.py:9" in loader.note
    main = found["return random.random()"]
    assert entries(main) == {"__main__ of rlhf.train": True} and main.severity == "warning"


@pytest.mark.parametrize("imported, call", [
    ("import transformers", "transformers.set_seed(self.seed)"),
    ("from accelerate.utils import set_seed", "set_seed(self.seed)"),
    ("import accelerate", "accelerate.utils.set_seed(self.seed)"),
    ("import lightning as L", "L.seed_everything(self.seed)"),
    ("from lightning.pytorch import seed_everything", "seed_everything(self.seed)"),
    ("import pytorch_lightning as pl", "pl.seed_everything(self.seed)"),
])
def test_each_library_seed_helper_counts_through_the_annotation_and_the_factory(root: Path, imported: str,
                                                                                call: str) -> None:
    """The actor's seed reaches its helper only through the annotated parameter (and the driver's through
    the factory that returns a local): each library helper is a seed there, and the actor's draw with
    the helper's call removed is an error."""
    files = {**STRATEGY, "rlhf/strategy.py": STRATEGY["rlhf/strategy.py"].replace(
        "import transformers", imported).replace("transformers.set_seed(self.seed)", call)}
    write_project(root, files)
    found = by_code(".")
    assert found["return DataLoader(buffer, batch_size=4, shuffle=True)"].severity == "warning"
    assert found["return random.random()"].severity == "warning"
    write_project(root, {**files, "rlhf/strategy.py": files["rlhf/strategy.py"].replace(call, "pass")})
    found = by_code(".")
    assert found["return DataLoader(buffer, batch_size=4, shuffle=True)"].severity == "error"
    assert found["return random.random()"].severity == "error"


@pytest.mark.parametrize("annotation", ['"Strategy"', "Optional[Strategy]", "Strategy | None"])
def test_annotation_forms(root: Path, annotation: str) -> None:
    files = dict(STRATEGY)
    files["rlhf/launcher.py"] = files["rlhf/launcher.py"].replace(
        "from rlhf.strategy import Strategy\n", "from typing import Optional\n\n        from rlhf.strategy import Strategy\n"
    ).replace("strategy: Strategy", f"strategy: {annotation}")
    write_project(root, files)
    assert by_code(".")["return DataLoader(buffer, batch_size=4, shuffle=True)"].severity == "warning"


def test_without_the_annotation_the_seed_call_is_unresolved_and_the_draw_unproven(root: Path) -> None:
    """The parameter's class unknown, `strategy.setup_distributed()` resolves to nothing: the actor's
    seeding is not shown; a seed-like call it makes that the scan cannot follow makes it unproven."""
    files = dict(STRATEGY)
    files["rlhf/launcher.py"] = files["rlhf/launcher.py"].replace("strategy: Strategy", "strategy")
    write_project(root, files)
    loader = by_code(".")["return DataLoader(buffer, batch_size=4, shuffle=True)"]
    assert loader.severity == "error" and loader.note == (
        "runs in PolicyActor (Ray actor), which does not seed the torch RNG before it")
    files["rlhf/launcher.py"] = files["rlhf/launcher.py"].replace(
        "strategy.setup_distributed()", "strategy.setup_distributed()\n                strategy.init_seed()")
    write_project(root, files)
    loader = by_code(".")["return DataLoader(buffer, batch_size=4, shuffle=True)"]
    assert loader.severity == "unproven"
    assert loader.note == ("PolicyActor (Ray actor) seeds the torch RNG only if strategy.init_seed() in "
                           "BaseActor._setup_distributed, rlhf/launcher.py:7 does: a call the scan cannot resolve")


@pytest.mark.parametrize("call", ["g.manual_seed(1)", "self_rng = np.random.default_rng(1); self_rng.seed(2)",
                                  "gen = torch.Generator(); gen.manual_seed(3)"])
def test_a_generator_of_its_own_is_no_unresolved_seed(root: Path, call: str) -> None:
    files = dict(STRATEGY)
    files["rlhf/launcher.py"] = files["rlhf/launcher.py"].replace("strategy: Strategy", "strategy").replace(
        "strategy.setup_distributed()", f"g = torch.Generator()\n                {call}").replace(
        "from rlhf.strategy import Strategy\n", "import numpy as np\n        import torch\n")
    write_project(root, files)
    assert by_code(".")["return DataLoader(buffer, batch_size=4, shuffle=True)"].severity == "error"


# -- processes: pool workers by function, command-line entries by file -----------------------------

POOL = {
    "rew/__init__.py": "",
    "rew/score.py": """
        import random
        from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
        from multiprocessing import Pool


        def reward(sample):
            items = list(sample)
            random.shuffle(items)
            return items


        def judge(sample):
            return random.random()


        def local(sample):
            return random.choice(sample)


        def run(samples):
            with Pool(4) as pool:
                out = pool.map(reward, samples)
            executor = ProcessPoolExecutor(max_workers=2)
            out += list(executor.map(judge, samples))
            with ThreadPoolExecutor() as threads:
                out += [threads.submit(local, s).result() for s in samples]
            return out


        if __name__ == "__main__":
            random.seed(0)
            run([[1, 2], [3, 4]])
        """,
}


def test_process_pool_workers_are_processes_named_by_function(root: Path) -> None:
    write_project(root, POOL)
    found = by_code(".")
    assert entries(found["random.shuffle(items)"]) == {"reward (process-pool worker)": False}
    assert found["random.shuffle(items)"].severity == "error"
    assert entries(found["return random.random()"]) == {"judge (process-pool worker)": False}
    # a thread pool runs its function in this process: the seeded __main__
    assert entries(found["return random.choice(sample)"]) == {"__main__ of rew.score": True}


# -- draws switched off by their callers' arguments, and by a module's eval mode -------------------

SWITCHED = {
    "rm/__init__.py": "",
    "rm/model.py": """
        def get_model(path, init_value_head=False):
            model = load(path)
            if init_value_head:
                model.head.weight.data.normal_(mean=0.0, std=0.02)
            return model


        def load(path):
            return path
        """,
    "rm/serve.py": """
        from rm.model import get_model


        class Proxy:
            def __init__(self, path):
                self.model = get_model(path)


        if __name__ == "__main__":
            Proxy("x")
        """,
}


def test_a_draw_every_call_switches_off_runs_in_no_process(root: Path) -> None:
    write_project(root, SWITCHED)
    draw = by_code(".")["model.head.weight.data.normal_(mean=0.0, std=0.02)"]
    assert draw.severity == "warning"
    assert draw.note == ("not run in __main__ of rm.serve: every call that reaches it passes arguments that make "
                         "`init_value_head` false")
    for call in ("get_model(path, True)", "get_model(path, init_value_head=True)", "get_model(path, **opts)",
                 "get_model(path, flag)"):
        files = {**SWITCHED, "rm/serve.py": SWITCHED["rm/serve.py"].replace("get_model(path)", call)}
        write_project(root, files)
        assert by_code(".")["model.head.weight.data.normal_(mean=0.0, std=0.02)"].severity == "error", call


EVAL = {
    "lab/__init__.py": "",
    "lab/model.py": """
        from torch import nn


        class Head(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.drop = nn.Dropout(0.1)


        class Scorer(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.head = Head(d)


        def build(d):
            return Scorer(d)
        """,
    "lab/serve.py": """
        from lab.model import build


        def main():
            scorer = build(8)
            scorer = scorer.to("cpu")
            scorer.eval()
            return scorer


        if __name__ == "__main__":
            main()
        """,
}


@pytest.mark.parametrize("change, draws", [
    (None, False),
    (("scorer.eval()", "scorer.eval()\n            scorer.train()"), True),  # back in training mode
    (("scorer.eval()", "pass"), True),  # never put in eval mode
    (("scorer.eval()", "scorer.train(False)"), False),
    (("scorer = build(8)", "scorer = build(8)\n            keep(build(8))"), True),  # an instance not followed
    (("scorer.eval()", "scorer.eval()\n            other.train()"), True),  # an object the scan cannot place
    (("scorer.eval()", "scorer.eval()\n            [scorer][0].train()"), True),  # nor a name for the object
])
def test_dropout_in_a_module_that_is_eval_only_draws_nothing(root: Path, change: tuple[str, str] | None,
                                                             draws: bool) -> None:
    files = dict(EVAL)
    if change is not None:
        files["lab/serve.py"] = files["lab/serve.py"].replace(*change)
    write_project(root, files)
    drop = by_code(".")["self.drop = nn.Dropout(0.1)"]
    assert drop.severity == ("error" if draws else "warning"), drop.note
    if not draws:
        assert drop.note == ("not run in __main__ of lab.serve: every Head this process builds is put in eval mode "
                             "(Scorer) and never back in training mode: it draws nothing")


@pytest.mark.parametrize("line, finding", [
    ("torch.nn.functional.dropout(x, 0.1, training=False)", False),
    ("torch.nn.functional.dropout(x, p=0.0)", False),
    ("torch.nn.Dropout(0)", False),
    ("torch.nn.Dropout(p=0.1)", True),
    ("torch.nn.functional.dropout(x, 0.1, training=True)", True),
])
def test_dropout_that_cannot_draw_is_no_finding(root: Path, line: str, finding: bool) -> None:
    write_project(root, {"lab/__init__.py": "", "lab/m.py": f"import torch\n\n\ndef f(x):\n    return {line}\n"})
    assert bool(by_code(".")) is finding


# -- DA107: a diffusers pipeline called without generator= or latents= ------------------------------

PIPELINE = {
    "gen/__init__.py": "",
    "gen/sample.py": """
        import torch
        from diffusers import StableDiffusion3Pipeline


        class Sampler:
            def __init__(self, path):
                self.pipe = StableDiffusion3Pipeline.from_pretrained(path).to("cuda")

            def sample(self, prompts):
                return self.pipe(prompts, num_inference_steps=28).images


        if __name__ == "__main__":
            Sampler("m").sample(["a cat"])
        """,
}


@pytest.mark.parametrize("call, finding", [
    ("self.pipe(prompts, num_inference_steps=28)", True),
    ("self.pipe(prompts, generator=torch.Generator().manual_seed(0))", False),
    ("self.pipe(prompts, latents=torch.zeros(1))", False),
    ("self.pipe(prompts, generator=None)", True),
])
def test_da107_a_pipeline_called_without_a_generator(root: Path, call: str, finding: bool) -> None:
    files = {**PIPELINE, "gen/sample.py": PIPELINE["gen/sample.py"].replace(
        "self.pipe(prompts, num_inference_steps=28)", call)}
    write_project(root, files)
    found = {f.rule: f for f in by_code(".").values()}
    assert ("DA107" in found) is finding
    if finding:
        assert entries(found["DA107"]) == {"__main__ of gen.sample": False} and found["DA107"].severity == "error"


def test_da107_is_one_record_with_docs_sarif_and_explain(root: Path) -> None:
    explained = run_cli("scan-rng", "--explain", "DA107")
    assert explained.code == 0 and "diffusers pipeline called without generator= or latents=" in explained.out
    assert "Fix:\n  Pass generator=" in explained.out
    write_project(root, PIPELINE)
    sarif = json.loads(run_cli("scan-rng", ".", "--format", "sarif", "--no-cache", cwd=root).out)
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["DA107"]["properties"]["rngFamily"] == "torch"
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["DA107"]


# -- the verdict counts in every output, and the exit codes ---------------------------------------

UNPROVEN_AND_ERROR = {
    "app/__init__.py": "",
    "app/train.py": """
        import random

        import app.user  # noqa: F401


        def main():
            return random.random()


        if __name__ == "__main__":
            main()
        """,
    "app/orphan.py": """
        import torch


        def unused(n):
            return torch.rand(n)
        """,
    "app/user.py": "from app.orphan import unused\n\nVALUE = unused\n",
}


def test_every_format_counts_each_verdict(root: Path) -> None:
    write_project(root, UNPROVEN_AND_ERROR)
    text = run_cli("scan-rng", ".", "--no-cache", cwd=root)
    assert text.code == 1 and "1 errors, 1 unproven, 0 warnings" in text.out
    assert "unproven DA101" in text.out
    doc = json.loads(run_cli("scan-rng", ".", "--format", "json", "--no-cache", cwd=root).out)
    assert doc["counts"] == {"error": 1, "unproven": 1, "warning": 0}
    assert sorted(f["severity"] for f in doc["findings"]) == ["error", "unproven"]
    sarif = json.loads(run_cli("scan-rng", ".", "--format", "sarif", "--no-cache", cwd=root).out)
    run = sarif["runs"][0]
    assert run["properties"]["verdictCounts"] == {"error": 1, "unproven": 1, "warning": 0}
    assert sorted((r["level"], r["properties"]["verdict"]) for r in run["results"]) == [
        ("error", "error"), ("warning", "unproven")]
    github = run_cli("scan-rng", ".", "--format", "github", "--no-cache", cwd=root).out.splitlines()
    assert any(",title=DA101 (unproven)::" in line for line in github)
    assert github[-1] == "::notice title=scan-rng::1 errors, 1 unproven, 0 warnings"
    summary = root / "summary.md"
    junit = root / "scan.xml"
    ci = run_cli("scan-rng", ".", "--no-cache", "--junit-xml", str(junit), cwd=root,
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert ci.code == 1
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["app/train.py:7 DA301"].find("failure") is not None
    assert cases["app/orphan.py:5 DA101"].find("skipped") is not None  # unproven: not failing by default
    assert "**FAILED**" in summary.read_text() and "1 errors, 1 unproven, 0 warnings" in summary.read_text()
    passing = run_cli("scan-rng", "app/orphan.py", "app/user.py", "--no-cache", "--junit-xml", str(junit), cwd=root)
    assert passing.code == 0
    assert run_cli("scan-rng", "app/orphan.py", "app/user.py", "--fail-on", "unproven", "--no-cache", cwd=root).code == 1


# -- the baseline: verdict and process in the fingerprint --------------------------------------------

SEEDED = {
    "svc/__init__.py": "",
    "svc/worker.py": """
        import random

        import ray


        def helper(items):
            random.shuffle(items)
            return items


        @ray.remote
        class Worker:
            def __init__(self, seed):
                random.seed(seed)

            def step(self, items):
                return helper(items)


        @ray.remote
        class Other:
            def __init__(self, seed):
                random.seed(seed)

            def step(self, items):
                return items
        """,
    "svc/drive.py": """
        import ray

        from svc.worker import Other, Worker


        def main():
            return ray.get([Worker.remote(0).step.remote([1, 2]), Other.remote(0).step.remote([3])])


        if __name__ == "__main__":
            main()
        """,
}


def _baseline_then(root: Path, files: dict[str, str], edit: tuple[str, str, str]) -> tuple[int, list[dict]]:
    """Write ``files``, record a baseline, apply ``edit`` (path, old, new), scan against the baseline."""
    write_project(root, files)
    assert run_cli("scan-rng", ".", "--write-baseline", "base.json", "--no-cache", cwd=root).code in (0, 1)
    path, old, new = edit
    text = (root / path).read_text()
    assert old in text
    (root / path).write_text(text.replace(old, new))
    result = run_cli("scan-rng", ".", "--baseline", "base.json", "--format", "json", "--no-cache", cwd=root)
    return result.code, json.loads(result.out)["findings"]


def test_a_removed_seed_escalates_past_the_baseline(root: Path) -> None:
    code, new = _baseline_then(root, SEEDED, ("svc/worker.py", "        random.seed(seed)\n\n    def step(self, items):\n        return helper",
                                              "        pass\n\n    def step(self, items):\n        return helper"))
    assert code == 1 and [(f["code"], f["severity"]) for f in new] == [("random.shuffle(items)", "error")]


def test_an_unchanged_tree_and_a_milder_verdict_stay_hidden(root: Path) -> None:
    write_project(root, SEEDED)
    assert run_cli("scan-rng", ".", "--write-baseline", "base.json", "--no-cache", cwd=root).code == 0
    same = run_cli("scan-rng", ".", "--baseline", "base.json", "--no-cache", cwd=root)
    assert same.code == 0 and "(1 findings in the baseline not shown; every finding shown is new)" in same.out
    write_project(root, {**SEEDED, "svc/worker.py": SEEDED["svc/worker.py"].replace(
        "random.seed(seed)\n\n            def step(self, items):\n                return helper",
        "pass\n\n            def step(self, items):\n                return helper")})
    assert run_cli("scan-rng", ".", "--write-baseline", "base.json", "--no-cache", cwd=root).code == 1
    write_project(root, SEEDED)  # seeded again: the error became a warning, which the baseline covers
    assert run_cli("scan-rng", ".", "--baseline", "base.json", "--no-cache", cwd=root).code == 0


def test_the_same_code_in_a_new_function_is_new(root: Path) -> None:
    code, new = _baseline_then(root, SEEDED, ("svc/worker.py", "@ray.remote\nclass Worker:",
                                              "def helper2(items):\n    random.shuffle(items)\n"
                                              "    return items\n\n\n@ray.remote\nclass Worker:"))
    # nothing names helper2 (a warning): new, shown, not failing; the same draw in helper is hidden
    assert [(f["function"], f["severity"]) for f in new] == [("svc.worker.helper2", "warning")] and code == 0


def test_a_new_process_running_a_draw_is_new(root: Path) -> None:
    code, new = _baseline_then(root, SEEDED, ("svc/worker.py", "    def step(self, items):\n        return items\n",
                                              "    def step(self, items):\n        return helper(items)\n"))
    assert code == 0 and [sorted(p["entry"] for p in f["processes"]) for f in new] == [
        ["Other (Ray actor)", "Worker (Ray actor)"]]  # both seed: a warning, new but not failing


def test_an_older_baseline_is_refused_with_one_line(root: Path) -> None:
    write_project(root, SEEDED)
    (root / "old.json").write_text('{"schema": "detaudit/scan-baseline/1", "findings": []}\n')
    result = run_cli("scan-rng", ".", "--baseline", "old.json", "--no-cache", cwd=root)
    assert result.code == 2 and result.err.strip() == (
        "detaudit: error: old.json: a baseline of an older scan-rng, without verdicts or processes: write it "
        "again with --write-baseline")


def test_a_process_that_stops_seeding_is_new_though_the_verdict_stays(root: Path) -> None:
    """Worker never seeds (an error already); Other stops seeding too: still an error, now with a second
    unseeded process: new."""
    files = {**SEEDED, "svc/worker.py": SEEDED["svc/worker.py"].replace(
        "random.seed(seed)\n\n            def step(self, items):\n                return helper",
        "pass\n\n            def step(self, items):\n                return helper").replace(
        "            def step(self, items):\n                return items\n",
        "            def step(self, items):\n                return helper(items)\n")}
    code, new = _baseline_then(root, files, ("svc/worker.py", "        random.seed(seed)\n", "        pass\n"))
    assert code == 1 and [(f["severity"], sorted((p["entry"], p["seeded"]) for p in f["processes"])) for f in new] == [
        ("error", [("Other (Ray actor)", False), ("Worker (Ray actor)", False)])]


def test_an_escalation_with_the_same_processes_is_new(root: Path) -> None:
    """The draw's line is unchanged and so are its processes; its value now reaches data: a warning
    that became an error."""
    files = {"net/__init__.py": "", "net/boot.py": """
        import random

        import ray


        @ray.remote
        def boot(sock, data):
            port = random.randint(20000, 30000)
            sock.bind(("", port))
            return data
        """}
    code, new = _baseline_then(root, files, ("net/boot.py", "    return data\n", "    return data[port]\n"))
    assert code == 1 and [(f["code"], f["severity"]) for f in new] == [("port = random.randint(20000, 30000)", "error")]


def test_a_warning_that_becomes_unproven_is_new_and_fails(root: Path) -> None:
    """Worker's seed call replaced by one the scan cannot resolve: its draw goes from warning (seeded) to
    unproven; the baseline's warning does not hide it, and a new unproven finding fails the gate."""
    files = {**SEEDED, "svc/worker.py": SEEDED["svc/worker.py"].replace("import ray\n", "import ray\n        from somelib import utils\n")}
    code, new = _baseline_then(root, files, ("svc/worker.py", "        random.seed(seed)\n\n    def step(self, items):\n        return helper",
                                             "        utils.set_random_seed(seed)\n\n    def step(self, items):\n        return helper"))
    assert code == 1 and [(f["code"], f["severity"]) for f in new] == [("random.shuffle(items)", "unproven")]


def test_a_warning_that_becomes_unproven_with_the_same_processes_is_new(root: Path) -> None:
    """A port drawn in an unseeded task only reaches bind() (a warning); it now also flows into a call
    the scan does not follow: unproven (inert by its name alone), with the same process, unseeded as
    before; new against the baseline, and failing."""
    files = {"net/__init__.py": "", "net/boot.py": """
        import random

        import ray


        @ray.remote
        def boot(sock, data, registry):
            port = random.randint(20000, 30000)
            sock.bind(("", port))
            return data
        """}
    code, new = _baseline_then(root, files, ("net/boot.py", "    return data\n",
                                             "    registry.announce(port)\n    return data\n"))
    assert code == 1 and [(f["code"], f["severity"]) for f in new] == [("port = random.randint(20000, 30000)",
                                                                        "unproven")]


def test_a_new_unproven_finding_fails_against_the_baseline(root: Path) -> None:
    write_project(root, SEEDED)
    assert run_cli("scan-rng", ".", "--write-baseline", "base.json", "--no-cache", cwd=root).code == 0
    write_project(root, {**SEEDED, **{k: v for k, v in UNPROVEN_AND_ERROR.items() if k != "app/train.py"},
                         "svc/drive.py": SEEDED["svc/drive.py"].replace("import ray\n", "import ray\n\n        import app.user  # noqa: F401\n")})
    result = run_cli("scan-rng", ".", "--baseline", "base.json", "--format", "json", "--no-cache", cwd=root)
    assert [f["severity"] for f in json.loads(result.out)["findings"]] == ["unproven"]
    assert result.code == 1  # new and unproven: the gate fails, whatever --fail-on says
    assert run_cli("scan-rng", ".", "--no-cache", cwd=root).code == 0  # without a baseline: exit 0


@pytest.mark.parametrize("call, torch_verdict, random_verdict", [
    ("mpu.model_parallel_cuda_manual_seed(0)", "unproven", "error"),  # CUDA seeding: torch's family only
    ("utils.set_random_seed(0)", "unproven", "unproven"),  # any family
    ("utils.np_seed(0)", "error", "error"),  # numpy's only
])
def test_an_unresolved_seed_covers_only_the_families_its_name_can_seed(root: Path, call: str, torch_verdict: str,
                                                                      random_verdict: str) -> None:
    write_project(root, {"w/__init__.py": "", "w/worker.py": f"""
        import random

        import ray
        import torch
        from megatron.core import mpu
        from somelib import utils


        @ray.remote
        class Worker:
            def __init__(self):
                {call}

            def step(self, items):
                random.shuffle(items)
                return torch.randperm(len(items))


        def main():
            return ray.get(Worker.remote().step.remote([1]))


        if __name__ == "__main__":
            main()
        """})
    found = by_code(".")
    assert found["return torch.randperm(len(items))"].severity == torch_verdict
    assert found["random.shuffle(items)"].severity == random_verdict
