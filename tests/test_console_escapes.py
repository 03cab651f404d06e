"""Names from other people's files never drive the reader's terminal: control characters in a
series name are printed as escapes by every console report."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def test_a_series_name_with_an_escape_sequence_is_shown_escaped(tmp_path: Path) -> None:
    name = "train\x1b[2Jloss"  # ESC [2J clears a terminal
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"meta": {}, "metrics": {name: [[0, 1.0], [1, 2.0]]}}))
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"step": s, name: v}) + "\n" for s, v in ((0, 1.0), (1, 2.5))))
    result = run_cli("verify", "--metrics", str(run), "--standard", str(standard))
    assert result.code == 1, result.text
    assert "\x1b" not in result.out + result.err
    assert "train\\x1b[2Jloss" in result.out, result.out
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"step": s, name: v}) + "\n" for s, v in ((0, 1.0), (1, 2.0))))
    diff = run_cli("diff", str(run), str(other))
    assert "\x1b" not in diff.out + diff.err and "train\\x1b[2Jloss" in diff.out, diff.out


def test_a_failing_verify_against_a_golden_without_an_environment_lists_no_provenance(tmp_path: Path) -> None:
    """A Megatron-LM golden records no environment: a failing verify compares none (and probes none)."""
    golden = tmp_path / "golden_values_dev.json"
    golden.write_text(json.dumps({"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1,
                                              "values": {"1": 10.5, "2": 10.25}}}, indent=4))
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"step": s, "lm loss": v}) + "\n" for s, v in ((1, 10.5), (2, 10.0))))
    result = run_cli("verify", "--metrics", str(run), "--standard", str(golden), "--json")
    doc = json.loads(result.out)
    assert result.code == 1 and doc["status"] == "failed" and doc["provenance"] == [], result.text
