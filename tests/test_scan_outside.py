"""scan-rng: `__main__` blocks outside the pipeline (issue #23): a module's self-test block and a
stand-alone tool are judged like tests, unless a launch file of the tree names the script.

Shapes seen in flow_grpo: ``flow_grpo/rewards.py`` (imported by the training scripts) ends in a demo
``__main__`` that builds a scorer unseeded; ``dataset/merge_genevaltask.py`` (imports json and
random only) built a committed data file. Each test fails when its mechanism is broken.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scan_tree import by_code, entries, root, write_project  # noqa: F401 (root: a fixture)

from detaudit.scan import ScanConfig, scan

SELF_TEST = {
    "lab/__init__.py": "",
    "lab/scorer.py": """
        import torch


        class Scorer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = torch.nn.Dropout(0.2)


        def build():
            return Scorer()


        if __name__ == "__main__":
            print(build()(torch.randn(4)))
        """,
    "scripts/train.py": """
        import torch

        from lab.scorer import build


        def main():
            torch.manual_seed(0)
            build()


        if __name__ == "__main__":
            main()
        """,
    "README.md": "Train: `accelerate launch scripts/train.py`\n",
}

TOOL = {
    "data/merge.py": """
        import json
        import random


        def sample(rows, k):
            return random.sample(rows, k)


        if __name__ == "__main__":
            rows = json.load(open("rows.json"))
            json.dump(sample(rows, 10), open("picked.json", "w"))
        """,
}


def test_a_self_test_block_of_an_imported_module_is_not_the_pipeline(root: Path) -> None:
    write_project(root, SELF_TEST)
    found = by_code(".")
    demo = found["print(build()(torch.randn(4)))"]
    assert demo.severity == "warning", demo.note
    assert "the self-test block of lab/scorer.py, a module the launched entries (__main__ of train) load; " \
           "nothing launches it" in demo.note
    assert "(--tests-as-pipeline: an error)" in demo.note
    drop = found["self.drop = torch.nn.Dropout(0.2)"]
    # the training script seeds; the demo's own unseeded run of Scorer is not the pipeline
    assert drop.severity == "warning", drop.note
    assert entries(drop) == {"__main__ of lab.scorer": False, "__main__ of train": True}
    summary = {p["entry"]: p for p in scan(["."], ScanConfig(), use_cache=False).processes}
    assert summary["__main__ of lab.scorer"]["outside_pipeline"].startswith("the self-test block of lab/scorer.py")
    assert "outside_pipeline" not in summary["__main__ of train"]
    strict = by_code(".", tests_as_pipeline=True)
    assert strict["print(build()(torch.randn(4)))"].severity == "error"
    assert strict["self.drop = torch.nn.Dropout(0.2)"].severity == "error"


@pytest.mark.parametrize(("path", "text"), [
    ("README.md", "Score a folder: `python lab/scorer.py images/`\n"),
    ("launch/score.sh", "python -m lab.scorer --images images/\n"),
    ("Makefile", "score:\n\tpython lab/scorer.py\n"),
], ids=["readme-path", "shell-module", "makefile"])
def test_a_self_test_block_a_launch_file_names_is_the_pipeline(root: Path, path: str, text: str) -> None:
    write_project(root, {**SELF_TEST, path: text})
    found = by_code(".")
    assert found["print(build()(torch.randn(4)))"].severity == "error"
    assert found["self.drop = torch.nn.Dropout(0.2)"].severity == "error"


def test_a_main_nothing_imports_stays_the_pipeline(root: Path) -> None:
    """Only tests import the module: its `__main__` is an entry like any script's (a package module's
    too: a rule that judged an unimported package module's block outside the pipeline turned real
    entries green, see docs/scan-rng.md, "Tests")."""
    files = {**SELF_TEST, "tests/test_scorer.py": "from lab.scorer import build\n\n\ndef test_build():\n    build()\n"}
    files["scripts/train.py"] = "import torch\n\nif __name__ == '__main__':\n    torch.manual_seed(0)\n"
    write_project(root, files)
    assert by_code(".")["print(build()(torch.randn(4)))"].severity == "error"


def test_a_stand_alone_tool_is_not_the_pipeline(root: Path) -> None:
    write_project(root, {**SELF_TEST, **TOOL})
    picked = by_code(".")["return random.sample(rows, k)"]
    assert picked.severity == "warning", picked.note
    assert "a stand-alone tool: data/merge.py imports only the standard library and data libraries, nothing of " \
           "the tree, starts no program, and nothing launches it" in picked.note
    assert by_code(".", tests_as_pipeline=True)["return random.sample(rows, k)"].severity == "error"


@pytest.mark.parametrize(("old", "new", "extra"), [
    ("import json\n", "import json\n        import numpy\n", {}),  # a framework: it may be the pipeline
    ("import json\n", "import json\n        from lab import scorer\n", {}),  # runs the tree's code
    ("import json\n", "import json\n", {"run.sh": "python data/merge.py && python scripts/train.py\n"}),
], ids=["framework", "tree-import", "launched"])
def test_a_script_that_can_be_the_pipeline_stays_an_entry(root: Path, old: str, new: str,
                                                          extra: dict[str, str]) -> None:
    tool = {"data/merge.py": TOOL["data/merge.py"].replace(old, new, 1)}
    write_project(root, {**SELF_TEST, **tool, **extra})
    assert by_code(".")["return random.sample(rows, k)"].severity == "error"


def test_a_package_main_module_is_always_an_entry(root: Path) -> None:
    """`python -m lab` runs lab/__main__.py, which no launch file need name."""
    write_project(root, {**SELF_TEST, "lab/__main__.py": "import random\n\nvalue = random.random()\n",
                         "lab/cli.py": "import lab.__main__\n"})
    assert by_code(".")["value = random.random()"].severity == "error"


def test_a_ray_task_defined_in_a_self_test_block_shares_its_verdict(root: Path) -> None:
    files = dict(SELF_TEST)
    files["lab/scorer.py"] += """
            import ray

            @ray.remote
            def probe(i):
                return torch.rand(2)

            ray.get([probe.remote(i) for i in range(2)])
        """
    write_project(root, files)
    probe = by_code(".")["return torch.rand(2)"]
    assert probe.severity == "warning", probe.note
    assert entries(probe) == {"probe (Ray task)": False}


def test_without_a_launched_entry_nothing_is_a_self_test(root: Path) -> None:
    """Only a launched entry's loading shows that a module is the pipeline's library: with no launch
    file naming any script, each `__main__` stays an entry (the training script may be launched
    from outside the tree)."""
    files = {k: v for k, v in SELF_TEST.items() if k != "README.md"}
    write_project(root, files)
    assert by_code(".")["print(build()(torch.randn(4)))"].severity == "error"


# A real entry that another, launched entry imports: the launch of the first lives elsewhere.
TRAIN_AND_EVAL = {
    "pkg/__init__.py": "",
    "pkg/train.py": """
        import torch


        def build_model():
            return torch.nn.Linear(2, 2)


        if __name__ == "__main__":
            batch = torch.randn(8, 2)
            build_model()(batch)
        """,
    "pkg/eval.py": """
        import torch

        from pkg.train import build_model

        if __name__ == "__main__":
            torch.manual_seed(0)
            build_model()
        """,
    "README.md": "Evaluate: `python -m pkg.eval`\n",
}


@pytest.mark.parametrize(("path", "text"), [
    ("jobs/train.slurm", "srun python pkg/train.py\n"),  # a batch script
    ("jobs/commands.txt", "python pkg/train.py --lr 1e-4\n"),  # plain notes
    ("launch.py", "import subprocess\n\nsubprocess.run(['python', 'pkg/train.py'], check=True)\n"),  # a launcher
    ("launch.py", "import runpy\n\nrunpy.run_module('pkg.train', run_name='__main__')\n"),  # runpy
    ("submit.py", "def go(client):\n    client.submit_job(entrypoint='python pkg/train.py')\n"),  # a Ray job
    ("setup.py", "from setuptools import setup\n\nsetup(entry_points={'console_scripts': ['x-train = pkg.train:main']})\n"),
    # a command line inside a longer string of the code, a docstring's usage line, an e2e test's run
    ("launch.py", "import subprocess\n\nsubprocess.run('torchrun --nproc_per_node 8 -m pkg.train --cfg a.yaml', shell=True)\n"),
    ("pkg/usage.py", '"""How to train.\n\nUsage::\n\n    python -m pkg.train --config c.yaml\n"""\n'),
    ("launch.py", "import subprocess\n\nsubprocess.run(['bash', '-c', 'python -m pkg.train'])\n"),
    ("submit.py", "def go(client):\n    client.submit_job(entrypoint='python -m pkg.train --steps 10')\n"),
    ("tests/test_e2e.py", "import subprocess\n\n\ndef test_short_run():\n"
                          "    subprocess.run('python -m pkg.train --steps 2', shell=True, check=True)\n"),
    # names built at run time launch every module or script they can name
    ("launch.py", "import os\n\nALGO = 'train'\nos.system(f'python -m pkg.{ALGO} --steps 2')\n"),
    ("launch.py", "import subprocess\n\n\ndef go(name):\n    subprocess.run(f'python pkg/{name}.py', shell=True)\n"),
    ("Makefile", "PKG := pkg\ntrain:\n\tpython -m $(PKG).train\n"),
    ("run.sh", 'MODULE=$1\npython -m "$MODULE"\n'),
    # launch files the search once missed: no space after -m, a folder named build
    ("docs/run.md", "Run `python3 -mpkg.train --steps 10`.\n"),
    ("deploy/build/run.sh", 'python -m pkg.train "$@"\n'),
], ids=["slurm", "txt", "subprocess", "runpy", "ray-job", "console-script", "shell-string-m", "docstring", "bash-c",
        "ray-job-m", "e2e-test", "f-string-m", "f-string-py", "make-module-variable", "shell-module-variable",
        "m-no-space", "build-folder"])
def test_an_entry_launched_anywhere_in_the_tree_stays_an_entry(root: Path, path: str, text: str) -> None:
    write_project(root, {**TRAIN_AND_EVAL, path: text})
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "error"


@pytest.mark.parametrize(("text", "launched"), [
    ("Run it as ..pkg.train\n", True),  # a word starts at its first letter
    ("entrypoint: pkg.train.main\n", True),  # a dotted word holds the module's name as its first parts
    ("entrypoint: pkg.trainer.main\n", False),  # ... only as whole parts
], ids=["leading-dots", "dotted-prefix", "other-part"])
def test_a_launch_names_a_module_by_whole_words(root: Path, text: str, launched: bool) -> None:
    write_project(root, {**TRAIN_AND_EVAL, "conf/job.txt": text})
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == ("error" if launched else "warning")


@pytest.mark.parametrize(("text", "launched"), [
    ("-m train --steps 2\n", True),  # the flag at the very start of the file
    ("python -m train\n", True),
    ("see the x-m train target\n", False),  # no flag: the end of a word
    ("make check--module train\n", False),
], ids=["flag-at-start", "flag", "flag-in-word", "module-flag-in-word"])
def test_a_module_flag_is_a_whole_word(root: Path, text: str, launched: bool) -> None:
    files = {"train.py": TRAIN_AND_EVAL["pkg/train.py"], "evaluate.py": TRAIN_AND_EVAL["pkg/eval.py"].replace(
        "from pkg.train import", "from train import"), "README.md": "Evaluate: `python evaluate.py`\n",
        "docs/run.txt": text}
    write_project(root, files)
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == ("error" if launched else "warning")


def test_without_a_launch_a_module_the_launched_entry_imports_is_a_self_test(root: Path) -> None:
    """The control for the cases above: without their launch, pkg/train.py's block is a self-test."""
    write_project(root, TRAIN_AND_EVAL)
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "warning"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_wide_text_launch_file_is_read(root: Path, encoding: str) -> None:
    """PowerShell writes UTF-16 with a byte-order mark: NUL bytes, yet text that launches."""
    write_project(root, TRAIN_AND_EVAL)
    text = "python -m pkg.train --steps 10\r\n"
    data = text.encode(encoding) if encoding != "utf-16-be" else b"\xfe\xff" + text.encode(encoding)
    (root / "run.ps1").write_bytes(data)
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "error"
    (root / "run.ps1").write_bytes(b"\0" * 16 + text.encode("utf-16-le"))  # no mark: a binary, not read
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "warning"


@pytest.mark.parametrize("imports", [
    "import mlx.core as mx", "import paddle", "import stable_baselines3", "import torch_xla", "import tinygrad",
    "torch = __import__('torch')", "import importlib", "from pkg import data", "import trace",
], ids=["mlx", "paddle", "sb3", "torch_xla", "tinygrad", "dunder-import", "importlib", "tree", "tree-stdlib-name"])
def test_a_script_that_may_train_is_no_tool(root: Path, imports: str) -> None:
    """Only the standard library and data libraries make a stand-alone tool: any other import keeps
    the script an entry (the list of training frameworks is never complete)."""
    script = f"import random\n{imports}\n\nif __name__ == '__main__':\n    order = list(range(9))\n    random.shuffle(order)\n"
    write_project(root, {"pkg/__init__.py": "", "pkg/data.py": "ROWS = []\n", "train_one.py": script,
                         "trace.py": "import torch\n\nMODEL = torch.nn.Linear(2, 2)\n"})  # the tree's, named like the stdlib's
    assert by_code(".")["random.shuffle(order)"].severity == "error"


@pytest.mark.parametrize(("path", "text"), [
    ("noxfile.py", "def train(session):\n    session.run('python', '-m', 'train')\n"),  # a module flag in code
    ("launch.py", "import subprocess\nimport sys\n\nsubprocess.run([sys.executable, '-m', 'train'])\n"),
    ("go.py", "import runpy\n\nrunpy.run_module('train', run_name='__main__')\n"),
    ("job.yaml", "command:\n  - python\n  - -m\n  - train\n"),  # k8s: one item a line
    ("run.sh", "torchrun --nproc_per_node 8 --module \\\n    train\n"),
    ("Makefile", "train:\n\tpython $(SCRIPT).py\n"),  # a script built from a variable
    ("deploy/train.Dockerfile", "CMD [\"python\", \"train.py\"]\n"),  # any text file is read
], ids=["nox-m", "subprocess-list-m", "runpy-top", "k8s-m", "torchrun-module", "make-variable", "dockerfile-suffix"])
def test_a_top_level_entry_launched_by_module_or_template_stays_an_entry(root: Path, path: str, text: str) -> None:
    files = {"train.py": TRAIN_AND_EVAL["pkg/train.py"], "evaluate.py": TRAIN_AND_EVAL["pkg/eval.py"].replace(
        "from pkg.train import", "from train import"), "README.md": "Evaluate: `python evaluate.py`\n", path: text}
    write_project(root, files)
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "error"
    # without the launch the same layout is a self-test: the case above is what keeps it an entry
    write_project(root, {k: v for k, v in files.items() if k != path})
    (root / path).unlink()
    assert by_code(".")["batch = torch.randn(8, 2)"].severity == "warning"


def test_a_launch_file_that_is_a_fifo_or_a_device_is_skipped(root: Path) -> None:
    import os
    write_project(root, SELF_TEST)
    os.mkfifo(root / "NOTES.txt")
    (root / "zero.txt").symlink_to("/dev/zero")
    assert by_code(".")["print(build()(torch.randn(4)))"].severity == "warning"


def test_without_a_launched_entry_nothing_is_a_tool(root: Path) -> None:
    """A stdlib-only script in a tree that launches nothing may be the whole pipeline (tabular RL)."""
    write_project(root, TOOL)
    assert by_code(".")["return random.sample(rows, k)"].severity == "error"


def test_a_build_folder_inside_an_excluded_folder_is_read_for_launches(root: Path) -> None:
    """Excluded folders and folders named build or dist are read for launch files (their Python is
    not scanned): a launcher kept there still runs the script."""
    write_project(root, {**TRAIN_AND_EVAL, "ops/build/run.sh": 'python -m pkg.train "$@"\n'})
    assert by_code(".", exclude=("ops",))["batch = torch.randn(8, 2)"].severity == "error"
