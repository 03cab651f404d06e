"""The example workflow for a user's repository (docs/ci/user-project.yml, issue #38): actionlint
passes, hosted CPU runners verify a portable card, self-hosted GPU runners verify by class, every
command parses, and nothing in it rewrites a standard."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from detaudit.cli import main

from conftest import REPO
from test_ci_workflow import actionlint

WORKFLOW = REPO / "docs" / "ci" / "user-project.yml"


def workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True)  # YAML 1.1 reads the key `on` as true
    return doc


def commands(job: dict) -> list[list[str]]:
    lines = [line.strip() for step in job["steps"] for line in step.get("run", "").replace("\\\n", " ").splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("detaudit ")]


@pytest.mark.slow
def test_actionlint_passes() -> None:
    assert actionlint(WORKFLOW) == []


def test_it_is_for_a_users_repository_not_this_one() -> None:
    text = WORKFLOW.read_text()
    assert "constraints.txt" not in text and "--cards recipes" not in text and "recipes/" not in text
    assert "pip install detaudit" in text and "pip install -r requirements.txt" in text
    assert "user-project.yml" in (REPO / "README.md").read_text()  # linked from the README


def test_hosted_cpu_runners_verify_the_portable_card_and_gpu_runners_verify_by_class() -> None:
    doc = workflow()
    assert doc["permissions"] == {"contents": "read"}
    cpu = doc["jobs"]["cpu-portable"]
    assert cpu["runs-on"] == "ubuntu-latest"
    assert ["verify", "train/detaudit.toml", "--junit-xml", "reports/detaudit.xml", "--html",
            "reports/detaudit.html"] in commands(cpu)
    assert 'portable = "x86_64-v1"' in WORKFLOW.read_text()
    gpu = doc["jobs"]["gpu-by-class"]
    assert gpu["runs-on"] == ["self-hosted", "linux", "${{ matrix.gpu }}"]
    assert gpu["strategy"]["matrix"]["gpu"] == "${{ fromJSON(needs.gpu-classes.outputs.gpus) }}"
    assert any(c[:2] == ["verify", "train/detaudit_gpu.toml"] for c in commands(gpu))
    for name, job in doc["jobs"].items():
        for args in commands(job):
            assert "--update" not in args and "--allow-other-runner" not in args, (name, args)
            with main.make_context("detaudit", list(args)) as ctx:  # every option parses
                sub = main.get_command(ctx, args[0])
                assert sub is not None
                sub.make_context(args[0], list(args[1:]), parent=ctx).close()
    records = [c for name, job in doc["jobs"].items() if name.startswith("record") for c in commands(job)]
    assert records and all(c[0] == "record" and "--runs" in c for c in records)


def test_the_gpu_class_list_comes_from_the_committed_standards(tmp_path: Path) -> None:
    import subprocess

    script = workflow()["jobs"]["gpu-classes"]["steps"][1]["run"]
    (tmp_path / "standards").mkdir()
    for name in ("train_gpu.h100-1gpu.json", "train_gpu.a100-1gpu.json", "train.cpu-x86_64-portable-v1.json"):
        (tmp_path / "standards" / name).write_text("{}")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path,
                          env={"GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == 'gpus=["a100","h100"]\n'
