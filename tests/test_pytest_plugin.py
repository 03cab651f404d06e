"""The pytest plugin as a team adopts it: tests/plugin_project (a small project whose tests write
metrics files and check them) is copied to a fresh folder and pytest is run in it through
pytester, from its root and from its tests/ folder, with and without pytest -n 2 (xdist)."""

from __future__ import annotations

import json
import shutil
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from conftest import REPO, write_card

pytest_plugins = ["pytester"]

PROJECT = REPO / "tests" / "plugin_project"
DEMO = ("DEMO_BUMP", "DEMO_EXTRA", "DEMO_DROP", "DEMO_MALFORMED")
# Spelled out here, not imported: the test says which variables must count as CI.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION",
                "CODEBUILD_BUILD_ID", "CIRCLECI", "TRAVIS", "DRONE")

# Where the package is installed with its entry point, pytest loads the plugin itself;
# in a checkout run through PYTHONPATH it is named with -p.
ENTRY_POINT_INSTALLED = any(ep.value == "detaudit.pytest_plugin" for ep in entry_points(group="pytest11"))
PLUGIN = () if ENTRY_POINT_INSTALLED else ("-p", "detaudit.pytest_plugin")
TRAINING = "tests/check_training.py"
LOSS = Path("tests/standards/check_training/test_loss.json")
GOLDEN = Path("tests/golden/golden_values_dev.json")


def test_entry_point_is_declared() -> None:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert doc["project"]["entry-points"]["pytest11"] == {"detaudit": "detaudit.pytest_plugin"}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo project in pytester's folder, on a machine that is not CI (this suite runs in CI)."""
    for name in CI_VARIABLES + DEMO:
        monkeypatch.delenv(name, raising=False)
    shutil.copytree(PROJECT, pytester.path, dirs_exist_ok=True)
    return pytester.path


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, *args)


def run_xdist(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest -n 2 in a subprocess: real worker processes, each with the plugin."""
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "xdist", "-n", "2", *args)


def test_standards_live_beside_the_test_file_whatever_the_current_directory(
        pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = run(pytester, TRAINING)
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines([f"*no standard {LOSS} (run pytest with --detaudit-update to write it)*"])
    run(pytester, TRAINING, "--detaudit-update").assert_outcomes(passed=2)
    assert (project / LOSS).is_file()
    monkeypatch.chdir(project / "tests")  # pytest run from tests/: the same standards, found
    from_tests = run(pytester, "check_training.py")
    from_tests.assert_outcomes(passed=2)
    assert sorted(p.name for p in (project / "tests").rglob("*.json")) == [
        "golden_values_dev.json", "test_loss.json", "test_loss_scaled.json"]


def test_the_standards_folder_is_configurable(pytester: pytest.Pytester, project: Path) -> None:
    run(pytester, TRAINING, "--detaudit-update", "-o", "detaudit_standards_dir=golden/det").assert_outcomes(passed=2)
    assert (project / "tests/golden/det/check_training/test_loss.json").is_file()
    assert not (project / LOSS).exists()


def test_an_update_that_changes_nothing_leaves_the_bytes(pytester: pytest.Pytester, project: Path) -> None:
    run(pytester, TRAINING, "--detaudit-update").assert_outcomes(passed=2)
    first = (project / LOSS).read_bytes()
    doc = json.loads(first)
    # Paths in the standard: relative to the project, or not there (the metrics were in tmp_path).
    assert doc["recorded"] == {"by": "pytest --detaudit-update", "test": "tests/check_training.py::test_loss", "runs": 2}
    assert str(pytester.path.parent) not in first.decode() and "pytest-of" not in first.decode()
    again = run(pytester, TRAINING, "--detaudit-update-all")
    again.assert_outcomes(passed=2)
    again.stdout.fnmatch_lines([f"unchanged (same bytes, not rewritten) {LOSS}"])
    assert (project / LOSS).read_bytes() == first


@pytest.mark.slow
def test_a_changed_value_fails_then_update_rewrites_only_that(pytester: pytest.Pytester, project: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, TRAINING, "--detaudit-update").assert_outcomes(passed=2)
    scaled = project / "tests/standards/check_training/test_loss_scaled.json"
    scaled_bytes = scaled.read_bytes()
    (project / LOSS).write_text((project / LOSS).read_text().replace("0.3333333333333333", "0.3333333333333334"))
    failed = run(pytester, TRAINING)
    failed.assert_outcomes(passed=1, failed=1)
    failed.stdout.fnmatch_lines([f"*FAILED against {LOSS}: 1 of 2 series differ*",
                                 "*train/loss: step 0: standard 0.3333333333333334, run 0.3333333333333333*"])
    updated = run(pytester, TRAINING, "--detaudit-update")
    updated.assert_outcomes(passed=2)
    updated.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl)"])
    assert "test_loss_scaled.json" not in updated.stdout.str() and scaled.read_bytes() == scaled_bytes
    run(pytester, TRAINING).assert_outcomes(passed=2)


@pytest.mark.slow
def test_update_under_xdist_writes_and_summarises(pytester: pytest.Pytester, project: Path) -> None:
    result = run_xdist(pytester, TRAINING, "tests/check_megatron.py", "--detaudit-update")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*detaudit standards updated*"])
    result.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl)"])
    result.stdout.fnmatch_lines(["re-recorded tests/standards/check_training/test_loss_scaled.json (from *"])
    assert (project / LOSS).is_file()


@pytest.mark.slow
def test_two_tests_on_one_standard_under_update_is_an_error_naming_both(pytester: pytest.Pytester,
                                                                       project: Path) -> None:
    for result in (run(pytester, "tests/check_shared.py", "--detaudit-update"),
                   run_xdist(pytester, "tests/check_shared.py", "--detaudit-update-all")):
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*detaudit: tests/standards/shared.json is checked by two tests under an update "
                                     "option: tests/check_shared.py::test_shared[[]*[]] and "
                                     "tests/check_shared.py::test_shared[[]*[]]; give each test its own standard*"])
        assert "test_shared[1.0]" in result.stdout.str() and "test_shared[3.0]" in result.stdout.str()
    # Without an update option, tests may share a standard: they only read it.
    run(pytester, "tests/check_shared.py").assert_outcomes(passed=1, failed=1)


def test_malformed_metrics_is_a_one_line_test_failure(pytester: pytest.Pytester, project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, TRAINING, "--detaudit-update").assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_MALFORMED", "1")
    for args in ((), ("--detaudit-update-all",)):
        result = run(pytester, TRAINING, *args)
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(["detaudit: */test_loss0/metrics.jsonl:3: invalid JSON*"])
        text = result.stdout.str()
        assert "Traceback" not in text and "detaudit/" + "data" not in text and "During handling" not in text
    broken = project / LOSS
    broken.write_text(broken.read_text()[:-20])
    monkeypatch.delenv("DEMO_MALFORMED")
    bad_standard = run(pytester, TRAINING)
    bad_standard.assert_outcomes(passed=1, failed=1)
    bad_standard.stdout.fnmatch_lines([f"detaudit: *{LOSS}*"])
    assert "Traceback" not in bad_standard.stdout.str()


@pytest.mark.parametrize("variable", CI_VARIABLES)
def test_every_ci_variable_refuses_updates_unless_forced(pytester: pytest.Pytester, project: Path,
                                                        monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "https://ci.example" if variable == "JENKINS_URL" else "true")
    refused = run(pytester, TRAINING, "--detaudit-update")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*refusing to update standards on a CI system ({variable} is set)*"
                                  "--detaudit-force-update*"])
    assert not (project / LOSS).exists()
    run(pytester, TRAINING, "--detaudit-update", "--detaudit-force-update").assert_outcomes(passed=2)
    monkeypatch.setenv(variable, "false")  # set, but off: not CI
    run(pytester, TRAINING, "--detaudit-update-all").assert_outcomes(passed=2)


@pytest.mark.slow
def test_new_and_missing_series_are_reported(pytester: pytest.Pytester, project: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, TRAINING, "--detaudit-update").assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_EXTRA", "1")
    new = run(pytester, TRAINING)
    new.assert_outcomes(passed=2)
    new.stdout.fnmatch_lines([f"new series, not in the standard, unchecked: {LOSS}: train/extra (pytest "
                              "--detaudit-update adds them) [tests/check_training.py::test_loss]"])
    added = run(pytester, TRAINING, "--detaudit-update")
    added.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl; new series: train/extra)"])
    assert "train/extra" in json.loads((project / LOSS).read_text())["series"]
    monkeypatch.delenv("DEMO_EXTRA")
    monkeypatch.setenv("DEMO_DROP", "1")
    missing = run(pytester, TRAINING)
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines(["*train/extra*", "*train/grad_norm*"])
    removed = run(pytester, TRAINING, "--detaudit-update")
    removed.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *; series no longer in the run, removed: "
                                  "train/extra, train/grad_norm)"])


@pytest.mark.slow
def test_updating_a_megatron_golden_keeps_its_format_and_sampling(pytester: pytest.Pytester, project: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    before = json.loads((project / GOLDEN).read_text())
    checked = run(pytester, "tests/check_megatron.py")
    checked.assert_outcomes(passed=1)
    checked.stdout.fnmatch_lines([f"new series, not in the standard, unchecked: {GOLDEN}: train/grad_norm (a megatron "
                                  "golden keeps the series it has)*"])
    monkeypatch.setenv("DEMO_BUMP", "0.5")
    run(pytester, "tests/check_megatron.py").assert_outcomes(failed=1)
    updated = run(pytester, "tests/check_megatron.py", "--detaudit-update")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines([f"re-recorded {GOLDEN} (from *; not added to this megatron golden*train/grad_norm)"])
    after = json.loads((project / GOLDEN).read_text())
    assert set(after) == {"lm loss"}
    header = {k: v for k, v in after["lm loss"].items() if k != "values"}
    assert header == {"start_step": 0, "end_step": 200, "step_interval": 5}
    assert list(after["lm loss"]["values"]) == list(before["lm loss"]["values"])  # 41 steps, not 201
    assert len(after["lm loss"]["values"]) == 41
    assert after["lm loss"]["values"]["5"] == before["lm loss"]["values"]["5"] + 0.5
    assert (project / GOLDEN).read_text().startswith('{\n    "lm loss": {\n        "start_step": 0,')
    run(pytester, "tests/check_megatron.py").assert_outcomes(passed=1)


@pytest.mark.slow
def test_marker_runs_and_verifies_a_card(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    card = write_card(pytester.path / "toy.toml")
    pytester.makepyfile(test_marker_card='''
import pytest

@pytest.mark.detaudit(card="toy.toml")  # from the project root (pytest's rootdir)
def test_toy():
    pass
''')
    first = run(pytester)
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*no standard for card 'toy'*"])
    recorded = run(pytester, "--detaudit-update")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["re-recorded *toy.cpu-test.json (card toy.toml, 2 agreeing runs)"])
    run(pytester).assert_outcomes(passed=1)
    # The card changes (a 4th step): the marked test fails with the first divergence.
    write_card(card, args=["--steps", "4"])
    changed = run(pytester)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*3 points in the standard, 4 in the run*"])
