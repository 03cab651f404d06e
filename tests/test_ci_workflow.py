"""The example GitHub Actions workflow in docs/ uses commands and options that exist."""

from __future__ import annotations

import shlex

import yaml

from detaudit.cli import main

from conftest import REPO, run_cli

WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"


def detaudit_commands() -> list[list[str]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    commands = []
    for job in doc["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                if line.strip().startswith("detaudit "):
                    commands.append(shlex.split(line)[1:])
    return commands


def test_workflow_uses_plan_verify_suite_junit() -> None:
    commands = detaudit_commands()
    assert [c[0] for c in commands] == ["plan", "verify", "scan-rng"]
    assert "--budget" in commands[0] and "--suite" in commands[1] and "--junit-xml" in commands[1]
    for args in commands:  # every option parses (click raises on an unknown one)
        with main.make_context("detaudit", list(args), resilient_parsing=False) as ctx:
            sub = main.get_command(ctx, args[0])
            assert sub is not None
            sub.make_context(args[0], list(args[1:]), parent=ctx)


def test_workflow_plan_step_passes_on_this_repository() -> None:
    plan = detaudit_commands()[0]
    result = run_cli(*plan, cwd=REPO)
    assert result.code == 0, result.text
    assert "sd3_pickscore_nft" in result.out and "within the budget" in result.out
