"""The package as a team installs it (issue #38): the wheel holds `detaudit` and nothing else, its
build floor can read its metadata, and on a fresh virtual environment WITHOUT torch (the base
install: click, rich, orjson) a toy project of a user's own is gated end to end: a bare command
says how to make a card, `init` writes one, `record` writes its standard, `verify` passes, a
1-ULP change fails naming the series and its step, the `--html` page and the JUnit report are
written. The recipe's own cards are not used: this is the path a team takes first."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

TRAIN = '''
import argparse, json, math, os
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--ulp", action="store_true")
args = parser.parse_args()
weight, lines = 1.0, []
for i in range(args.steps):
    weight -= 0.1 * (weight - 0.37 * (i % 3))
    loss = weight * weight
    if args.ulp and i == 3:
        loss = math.nextafter(loss, math.inf)
    lines.append(json.dumps({"step": 10 * i, "loss": loss, "lr": 0.1}))
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
    fh.write("\\n".join(lines) + "\\n")
'''


def test_the_build_floor_reads_the_license_string() -> None:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(doc["project"]["license"], str)  # PEP 639: setuptools reads this form from 77 on
    floor = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    assert floor == ["setuptools>=77"]
    assert doc["tool"]["setuptools"]["packages"]["find"]["include"] == ["detaudit*"]


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def base_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the wheel (and only its base dependencies) installed; its bin first on PATH."""
    where = tmp_path_factory.mktemp("wheel")
    # Build isolation: pip installs the build floor (setuptools>=77) itself, as any user's pip does.
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(where / "dist"),
                 str(REPO)], REPO, dict(os.environ))
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (where / "dist").glob("detaudit-*.whl")
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"detaudit"}, top  # no `recipes`, nothing else
    venv = where / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], where, dict(os.environ)).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "DETAUDIT"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv), COLUMNS="200")
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], where, env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv, env


@pytest.mark.slow
def test_a_users_own_job_on_the_base_install(base_install: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = base_install
    python = str(venv / "bin" / "python")
    gone = run([python, "-c", "import torch"], tmp_path, env)
    assert gone.returncode != 0  # the base install: no torch, no recipe extra
    pip_list = run([python, "-m", "pip", "list", "--format", "json"], tmp_path, env)
    names = {p["name"].lower() for p in json.loads(pip_list.stdout)}
    assert "torch" not in names and "numpy" not in names and {"click", "rich", "orjson", "detaudit"} <= names

    detaudit = [str(venv / "bin" / "detaudit")]
    root = tmp_path / "proj"
    (root / "train").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\n')
    (root / "train" / "train.py").write_text(TRAIN)

    # No card: one line naming how to make one, never the demo.
    for command in ("record", "verify", "env", "trace", "doctor"):
        bare = run([*detaudit, command], root, env)
        assert bare.returncode == 2, (command, bare.stdout + bare.stderr)
        assert bare.stderr.count("\n") == 1 and "detaudit init -- python train.py" in bare.stderr, bare.stderr
        assert "Traceback" not in bare.stderr

    made = run([*detaudit, "init", "--", "python", "train.py", "--steps", "6"], root / "train", env)
    assert made.returncode == 0, made.stderr
    card = "train/detaudit.toml"
    recorded = run([*detaudit, "record", card, "--runs", "2"], root, env)
    assert recorded.returncode == 0 and "RECORDED" in recorded.stdout, recorded.stdout + recorded.stderr
    (standard,) = (root / "standards").glob("train.*.json")
    assert set(json.loads(standard.read_text())["series"]) == {"loss", "lr"}  # `step` is the step, not a series

    passed = run([*detaudit, "verify", card], root, env)
    assert passed.returncode == 0 and "PASSED: 2 metric series match" in passed.stdout, passed.stdout + passed.stderr

    failed = run([*detaudit, "verify", card, "--html", "report.html", "--junit-xml", "junit.xml", "--", "--ulp"],
                 root, env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAILED: 1 of 2 metric series differ" in failed.stdout
    assert re.search(r"loss: step 30: standard \S+, run \S+ \(close.*1 ULPs\)", failed.stdout), failed.stdout
    page = (root / "report.html").read_text()
    assert "loss" in page and "<script" in page
    junit = (root / "junit.xml").read_text()
    assert re.search(r'<testcase [^>]*name="loss"[^>]*>\s*<failure', junit) and 'name="lr"' in junit


@pytest.mark.slow
def test_a_checkout_without_the_recipe_extra_names_what_is_missing(base_install: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    venv, env = base_install
    checkout = dict(env, PYTHONPATH=str(REPO))  # this repository's detaudit, beside its recipes/, without torch
    bare = run([str(venv / "bin" / "python"), "-m", "detaudit", "record"], tmp_path, checkout)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert bare.stderr.startswith("detaudit: error: no CARD given, and the bundled demo recipe needs the recipe extra "
                                  "(torch, ray, diffusers, transformers, peft not installed)")
    assert "detaudit init -- python train.py" in bare.stderr and not list(tmp_path.iterdir())
