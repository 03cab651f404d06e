"""The pytest plugin, run by pytester against real metrics files, standards and a real card run."""

from __future__ import annotations

import json
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from conftest import REPO, write_card, write_jsonl

pytest_plugins = ["pytester"]

# Where the package is installed with its entry point, pytest loads the plugin itself;
# in a checkout run through PYTHONPATH it is named with -p.
ENTRY_POINT_INSTALLED = any(ep.value == "detaudit.pytest_plugin" for ep in entry_points(group="pytest11"))
PLUGIN = () if ENTRY_POINT_INSTALLED else ("-p", "detaudit.pytest_plugin")

LINES = [json.dumps({"step_key": "step", "step": i, "train/loss": 1 / (i + 3), "perf/time": 1.0 * i}) for i in range(3)]


def test_entry_point_is_declared() -> None:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert doc["project"]["entry-points"]["pytest11"] == {"detaudit": "detaudit.pytest_plugin"}


def setup_metrics_tests(pytester: pytest.Pytester) -> tuple[Path, Path]:
    """Two tests, each writing metrics: `good` matches its standard, `bad` does not."""
    base = pytester.path
    write_jsonl(base / "good.jsonl", LINES)
    write_jsonl(base / "bad.jsonl", LINES)
    (base / "standards").mkdir()
    # Record both standards from the same lines, then make bad's run differ by one ULP.
    pytester.makepyfile(conftest="")
    pytester.makepyfile(test_writes=f'''
import json
from pathlib import Path

LINES = {LINES!r}

def write(path, bump=0.0):
    lines = [json.loads(line) for line in LINES]
    lines[1]["train/loss"] += bump
    Path(path).write_text("".join(json.dumps(line) + "\\n" for line in lines))

def test_good(detaudit):
    write("good.jsonl")
    detaudit.verify_metrics("good.jsonl", "standards/good.json")

def test_bad(detaudit):
    write("bad.jsonl", bump=1e-16)
    detaudit.verify_metrics("bad.jsonl", "standards/bad.json")
''')
    return base / "standards" / "good.json", base / "standards" / "bad.json"


def test_fixture_verifies_metrics_and_update_rewrites_only_what_failed(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    good, bad = setup_metrics_tests(pytester)
    missing = pytester.runpytest(*PLUGIN)
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines(["*no standard standards/good.json (run pytest with --detaudit-update to write it)*"])
    created = pytester.runpytest(*PLUGIN, "--detaudit-update")
    created.assert_outcomes(passed=2)
    created.stdout.fnmatch_lines(["*detaudit standards updated*", "re-recorded standards/*.json (from *.jsonl)"])
    assert "perf/time" not in json.loads(good.read_text())["series"]  # wall-clock series excluded
    # Now bad's standard holds the un-bumped values: its test's run is one ULP off.
    bad.write_text(good.read_text())
    good_bytes, bad_bytes = good.read_bytes(), bad.read_bytes()
    failed = pytester.runpytest(*PLUGIN)
    failed.assert_outcomes(passed=1, failed=1)
    failed.stdout.fnmatch_lines(["*FAILED against standards/bad.json: 1 of 1 series differ*",
                                 "*train/loss: step 1: standard 0.25, run 0.2500000000000001 (close*"])
    updated = pytester.runpytest(*PLUGIN, "--detaudit-update")
    updated.assert_outcomes(passed=2)
    assert good.read_bytes() == good_bytes and good.stat().st_mtime_ns > 0  # untouched
    assert bad.read_bytes() != bad_bytes
    updated.stdout.fnmatch_lines(["re-recorded standards/bad.json (from bad.jsonl)"])
    assert "re-recorded standards/good.json" not in updated.stdout.str()
    assert pytester.runpytest(*PLUGIN).ret == 0
    everything = pytester.runpytest(*PLUGIN, "--detaudit-update-all")
    everything.stdout.fnmatch_lines(["re-recorded standards/good.json*", "re-recorded standards/bad.json*"])


def test_update_is_refused_in_ci_unless_forced(pytester: pytest.Pytester, monkeypatch) -> None:
    setup_metrics_tests(pytester)
    monkeypatch.setenv("CI", "true")
    refused = pytester.runpytest(*PLUGIN, "--detaudit-update")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*refusing to update standards in CI*--detaudit-force-update*"])
    assert not (pytester.path / "standards" / "good.json").exists()
    forced = pytester.runpytest(*PLUGIN, "--detaudit-update", "--detaudit-force-update")
    forced.assert_outcomes(passed=2)


def test_marker_runs_and_verifies_a_card(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    card = write_card(pytester.path / "toy.toml")
    pytester.makepyfile(test_marker_card=f'''
import pytest

@pytest.mark.detaudit(card={str(card)!r})
def test_toy():
    pass
''')
    first = pytester.runpytest(*PLUGIN)
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*no standard for card 'toy'*"])
    recorded = pytester.runpytest(*PLUGIN, "--detaudit-update")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["re-recorded *toy.cpu-test.json (card *toy.toml, 2 agreeing runs)"])
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    # The card changes (a 4th step): the marked test fails with the first divergence.
    write_card(card, args=["--steps", "4"])
    changed = pytester.runpytest(*PLUGIN)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*3 points in the standard, 4 in the run*"])
