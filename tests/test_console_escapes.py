"""Names from other people's files never drive the reader's terminal: control characters in a
series name are printed as escapes by every console report."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
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


SPOOF = "loss\n[detaudit] PASSED: 1 metric series match std.json"


def test_a_newline_in_a_name_starts_no_line_of_its_own(tmp_path: Path) -> None:
    """A FAILED verify whose series name holds a newline and a fake verdict prints no line that
    begins with the fake verdict, in any report: text, JUnit, step summary, page."""
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"meta": {}, "metrics": {SPOOF: [[0, 1.0], [1, 2.0]]}}))
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"step": s, SPOOF: v}) + "\n" for s, v in ((0, 1.0), (1, 2.5))))
    junit, summary, page = tmp_path / "j.xml", tmp_path / "summary.md", tmp_path / "p.html"
    result = run_cli("verify", "--metrics", str(run), "--standard", str(standard), "--junit-xml", str(junit),
                     "--html", str(page), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1 and "FAILED" in result.out, result.text
    for text in (result.out, result.err, summary.read_text(), page.read_text()):
        assert not any(line.lstrip("| `").startswith("[detaudit] PASSED") for line in text.splitlines()), text
    assert "loss\\n[detaudit] PASSED" in result.out
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None and case.get("name") == SPOOF.replace("\n", "\\n")  # the name, one line
    assert "\n" not in case.find("failure").get("message")
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"step": s, SPOOF: v}) + "\n" for s, v in ((0, 1.0), (1, 2.0))))
    for args in (("diff", str(run), str(other)), ("standard", "diff", str(standard), str(standard))):
        out = run_cli(*args)
        assert not any(line.startswith("[detaudit] PASSED") for line in (out.out + out.err).splitlines()), out.text
    # an error line is one line too, whatever the path it names
    bad = tmp_path / "a\nb.jsonl"
    err = run_cli("verify", "--metrics", str(bad), "--standard", str(standard)).err
    assert err.count("\n") == 1 and "a\\nb.jsonl" in err, err


def test_lone_surrogates_and_undecodable_file_names_are_shown_never_a_traceback(tmp_path: Path) -> None:
    """A series name holding a lone surrogate (JSON can spell one) and a metrics file whose name is
    not UTF-8: the page, the step summary and the JUnit report are written, and a PASS stays exit 0."""
    name = "loss\udc80"
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"meta": {}, "metrics": {name: [[0, 1.0], [1, 2.0]]}}))
    run = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/run\xff.jsonl"))
    run.write_text("".join(json.dumps({"step": s, name: v}) + "\n" for s, v in ((0, 1.0), (1, 2.0))))
    junit, summary, page = tmp_path / "j.xml", tmp_path / "summary.md", tmp_path / "p.html"
    result = run_cli("verify", "--metrics", str(run), "--standard", str(standard), "--junit-xml", str(junit),
                     "--html", str(page), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 0 and "PASSED" in result.out, result.text
    assert "Traceback" not in result.err
    for text in (summary.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")):
        assert "run\\udcff.jsonl" in text and "\udc80" not in text
    assert "loss\\udc80" in page.read_text(encoding="utf-8")
    failing = tmp_path / "failing.jsonl"
    failing.write_text("".join(json.dumps({"step": s, name: v}) + "\n" for s, v in ((0, 1.0), (1, 2.5))))
    result = run_cli("diff", str(run), str(failing), "--html", str(tmp_path / "d.html"))
    assert result.code == 1 and "Traceback" not in result.err, result.text
    assert "loss\\udc80" in (tmp_path / "d.html").read_text(encoding="utf-8")


def test_scan_rng_github_annotations_stay_one_line_whatever_the_file_name(tmp_path: Path) -> None:
    """A file name holding a newline, ':' or ',' would end a workflow command's property and start
    a line of the name's choosing (another `::` command): escaped as GitHub defines, controls shown."""
    name = "a\n::notice::PASSED, all\x1b[2K.py"
    (tmp_path / name).write_text("import torch\n\n\ndef f():\n    return torch.randperm(3)\n\n\n"
                                 "if __name__ == '__main__':\n    f()\n")
    result = run_cli("scan-rng", ".", "--format", "github", "--no-cache", cwd=tmp_path)
    lines = result.out.splitlines()
    assert result.code == 1 and len(lines) == 2, result.text
    assert lines[0].startswith("::error file=a%0A%3A%3Anotice%3A%3APASSED%2C all\\x1b[2K.py,line=5,col=12,title=DA101::")
    assert "\x1b" not in result.out and lines[1].startswith("::notice title=scan-rng::")
