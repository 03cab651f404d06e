"""The command as a whole: help, version, and a start-up that never imports torch."""

from __future__ import annotations

import subprocess
import sys

from conftest import run_cli

PROBE = """
import sys
import detaudit, detaudit.cli, detaudit.data.compare, detaudit.data.metrics, detaudit.flows.record, detaudit.flows.verify
import detaudit.scan, detaudit.scan.output, detaudit.data.health, detaudit.env.determinism
print(sorted(m for m in ("torch", "numpy", "ray", "diffusers", "transformers") if m in sys.modules))
"""


def test_tool_imports_no_heavy_dependency() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_lists_every_command() -> None:
    result = run_cli("--help")
    assert result.code == 0
    for command in ("diff", "record", "verify", "scan-rng", "health"):
        assert command in result.out
        assert run_cli(command, "--help").code == 0


def test_usage_errors_exit_2() -> None:
    assert run_cli("diff").code == 2
    assert run_cli("record", "--runs", "1").code == 2
    assert run_cli("verify", "--metrics", "x.jsonl").code == 2  # no standard named
    assert run_cli("nope").code == 2
