"""The pytest plugin as a team adopts it: tests/plugin_project (a small project whose tests write
metrics files and check them) is copied to a fresh folder and pytest is run in it through
pytester, from its root and from its tests/ folder, with and without pytest -n 2 (xdist)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
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


def update(pytester: pytest.Pytester, *args: str, option: str = "--detaudit-update") -> pytest.RunResult:
    """An update from one run of each test (tests about agreeing runs say --detaudit-runs themselves)."""
    return run(pytester, *args, option, "--detaudit-runs", "1")


def run_xdist(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest -n 2 in a subprocess: real worker processes, each with the plugin."""
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "xdist", "-n", "2", *args)


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_standards_live_beside_the_test_file_whatever_the_current_directory(
        pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = run(pytester, TRAINING)
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines([f"*no standard {LOSS} (run pytest with --detaudit-update to write it)*"])
    update(pytester, TRAINING).assert_outcomes(passed=2)
    assert (project / LOSS).is_file()
    monkeypatch.chdir(project / "tests")  # pytest run from tests/: the same standards, found
    from_tests = run(pytester, "check_training.py")
    from_tests.assert_outcomes(passed=2)
    assert sorted(p.name for p in (project / "tests").rglob("*.json")) == [
        "golden_values_dev.json", "test_loss.json", "test_loss_scaled.json"]


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_standards_folder_is_configurable(pytester: pytest.Pytester, project: Path) -> None:
    update(pytester, TRAINING, "-o", "detaudit_standards_dir=golden/det").assert_outcomes(passed=2)
    assert (project / "tests/golden/det/check_training/test_loss.json").is_file()
    assert not (project / LOSS).exists()


@pytest.mark.slow
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
    update(pytester, TRAINING).assert_outcomes(passed=2)
    scaled = project / "tests/standards/check_training/test_loss_scaled.json"
    scaled_bytes = scaled.read_bytes()
    (project / LOSS).write_text((project / LOSS).read_text().replace("0.3333333333333333", "0.3333333333333334"))
    failed = run(pytester, TRAINING)
    failed.assert_outcomes(passed=1, failed=1)
    failed.stdout.fnmatch_lines([f"*FAILED against {LOSS}: 1 of 2 series differ*",
                                 "*train/loss: step 0: standard 0.3333333333333334, run 0.3333333333333333*"])
    updated = update(pytester, TRAINING)
    updated.assert_outcomes(passed=2)
    updated.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl, 1 agreeing runs)"])
    assert "test_loss_scaled.json" not in updated.stdout.str() and scaled.read_bytes() == scaled_bytes
    run(pytester, TRAINING).assert_outcomes(passed=2)


@pytest.mark.slow
def test_update_under_xdist_writes_and_summarises(pytester: pytest.Pytester, project: Path) -> None:
    result = run_xdist(pytester, TRAINING, "tests/check_megatron.py", "--detaudit-update")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*detaudit standards updated*"])
    result.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl, 2 agreeing runs)"])
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


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_malformed_metrics_is_a_one_line_test_failure(pytester: pytest.Pytester, project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    update(pytester, TRAINING).assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_MALFORMED", "1")
    for args in ((), ("--detaudit-update-all", "--detaudit-runs", "1")):
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
    # The decision is taken before any test runs: a session that selects none shows it without the
    # runs an update makes (the forced update itself: the next test).
    nothing = ("-k", "no_test_has_this_name")
    forced = run(pytester, TRAINING, "--detaudit-update", "--detaudit-force-update", *nothing)
    monkeypatch.setenv(variable, "false")  # set, but off: not CI
    off = run(pytester, TRAINING, "--detaudit-update-all", *nothing)
    for allowed in (forced, off):
        assert allowed.ret == pytest.ExitCode.NO_TESTS_COLLECTED, allowed.stderr.str()
        assert "refusing" not in allowed.stderr.str()


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_forced_update_on_ci_writes_the_standards(pytester: pytest.Pytester, project: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    update(pytester, TRAINING, "--detaudit-force-update").assert_outcomes(passed=2)
    assert (project / LOSS).is_file()
    monkeypatch.setenv("GITHUB_ACTIONS", "false")  # set, but off: not CI
    update(pytester, TRAINING, option="--detaudit-update-all").assert_outcomes(passed=2)


@pytest.mark.slow
def test_new_and_missing_series_are_reported(pytester: pytest.Pytester, project: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    update(pytester, TRAINING).assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_EXTRA", "1")
    new = run(pytester, TRAINING)
    new.assert_outcomes(passed=2)
    new.stdout.fnmatch_lines([f"new series, not in the standard, unchecked: {LOSS}: train/extra (pytest "
                              "--detaudit-update adds them) [tests/check_training.py::test_loss]"])
    added = update(pytester, TRAINING)
    added.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl, 1 agreeing runs; new series: train/extra)"])
    assert "train/extra" in json.loads((project / LOSS).read_text())["series"]
    monkeypatch.delenv("DEMO_EXTRA")
    monkeypatch.setenv("DEMO_DROP", "1")
    missing = run(pytester, TRAINING)
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines(["*train/extra*", "*train/grad_norm*"])
    removed = update(pytester, TRAINING)
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
    updated = update(pytester, "tests/check_megatron.py")
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


# -- standards from agreeing runs, bound to a runner class (#38) ------------------------------------

@pytest.mark.slow
def test_a_standard_comes_from_n_agreeing_runs_of_the_test(pytester: pytest.Pytester, project: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = run(pytester, TRAINING, "--detaudit-update", "--detaudit-runs", "3")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines([f"re-recorded {LOSS} (from *metrics.jsonl, 3 agreeing runs)"])
    doc = json.loads((project / LOSS).read_text())
    assert doc["recorded"]["runs"] == 3
    # The runner class and provenance of the machine the test ran on, as `detaudit record` writes them.
    assert doc["runner"]["class"][0] == "cpu" and "pytest" in doc["runner"]["packages"]
    assert "python" in doc["runner"] and "cpu" in doc["runner"]
    before = (project / LOSS).read_bytes()
    # A test whose runs disagree (a draw from an unseeded generator) writes nothing.
    monkeypatch.setenv("DEMO_UNSEEDED", "1")
    refused = run(pytester, TRAINING, "--detaudit-update-all", "--detaudit-runs", "2")
    refused.assert_outcomes(failed=2)
    refused.stdout.fnmatch_lines([f"*2 runs of tests/check_training.py::test_loss do not agree (disagree); {LOSS} "
                                  "not written*", "*train/noise*"])
    assert (project / LOSS).read_bytes() == before


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_standard_is_checked_against_its_runner_class(pytester: pytest.Pytester, project: Path) -> None:
    update(pytester, TRAINING).assert_outcomes(passed=2)
    doc = json.loads((project / LOSS).read_text())
    doc["runner"]["class"] = ["cpu", "elsewhere"]
    (project / LOSS).write_text(json.dumps(doc))
    other = run(pytester, TRAINING)
    other.assert_outcomes(passed=1, failed=1)
    other.stdout.fnmatch_lines([f"*NOT VERIFIED against {LOSS}: no standard for runner class cpu-*"])


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_unused_standards_are_reported_and_removed_only_when_asked(pytester: pytest.Pytester, project: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    update(pytester, TRAINING).assert_outcomes(passed=2)
    folder = project / LOSS.parent
    gone = folder / "test_renamed_away.json"
    gone.write_bytes((project / LOSS).read_bytes())
    orphan = folder.parent / "check_deleted_module" / "test_x.json"  # its test module no longer exists
    orphan.parent.mkdir()
    orphan.write_bytes((project / LOSS).read_bytes())
    (folder / "test_loss.obtained.jsonl").write_text("{}\n")  # a failure's output, not a standard
    reported = run(pytester, TRAINING)
    reported.assert_outcomes(passed=2)
    reported.stdout.fnmatch_lines(["unused standard (no test checks it): tests/standards/check_deleted_module/test_x.json",
                                   "unused standard (no test checks it): tests/standards/check_training/"
                                   "test_renamed_away.json",
                                   "2 unused standard(s): pytest --detaudit-remove-unused deletes them"])
    assert "test_loss.json" not in reported.stdout.str().split("detaudit standards")[-1]
    # A partial selection says nothing: the tests it left out may use them.
    partial = run(pytester, TRAINING, "-k", "test_loss_scaled")
    assert "unused standard" not in partial.stdout.str()
    monkeypatch.setenv("CI", "true")
    refused = run(pytester, TRAINING, "--detaudit-remove-unused")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and gone.exists()
    monkeypatch.delenv("CI")
    removed = run(pytester, TRAINING, "--detaudit-remove-unused")
    removed.stdout.fnmatch_lines(["removed unused standard tests/standards/check_deleted_module/test_x.json",
                                  "removed unused standard tests/standards/check_training/test_renamed_away.json"])
    assert not gone.exists() and not orphan.parent.exists() and (project / LOSS).is_file()  # an emptied folder goes
    assert "unused standard" not in run(pytester, TRAINING).stdout.str()


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_failed_check_leaves_what_it_obtained_beside_the_standard(pytester: pytest.Pytester, project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    update(pytester, TRAINING).assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_BUMP", "0.5")
    failed = run(pytester, TRAINING, "--detaudit-html")
    failed.assert_outcomes(failed=2)
    obtained = project / LOSS.with_name("test_loss.obtained.jsonl")
    failed.stdout.fnmatch_lines([f"obtained (beside its standard) {obtained.relative_to(project)}"])
    lines = [json.loads(line) for line in obtained.read_text().splitlines()]
    assert lines[0]["train/loss"] == 1 / 3 + 0.5  # the run's metrics, as the test wrote them
    page = obtained.with_suffix(".html")
    assert page.is_file() and "train/loss" in page.read_text()
    assert json.loads((project / LOSS).read_text())["series"]["train/loss"]["points"][0][1] == 1 / 3  # untouched


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_what_a_failed_check_leaves_is_never_written_over_a_fifo_or_a_folder(
        pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The obtained files go through the same output check as every command's reports."""
    update(pytester, TRAINING).assert_outcomes(passed=2)
    monkeypatch.setenv("DEMO_BUMP", "0.5")
    fifo = project / LOSS.with_name("test_loss.obtained.jsonl")
    os.mkfifo(fifo)
    folder = fifo.with_suffix(".html")
    folder.mkdir()
    failed = run(pytester, TRAINING, "--detaudit-html")
    failed.assert_outcomes(failed=2)
    failed.stdout.fnmatch_lines([f"could not write {fifo.relative_to(project)}*is a FIFO*"])
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and folder.is_dir() and not any(folder.iterdir())


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_marker_checks_every_argument_it_takes_and_refuses_others(pytester: pytest.Pytester,
                                                                       project: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "tests/check_marker.py"
    first = run(pytester, marker)
    first.assert_outcomes(failed=3)
    first.stdout.fnmatch_lines(["*no standard tests/standards/marked.json*",
                                "*@pytest.mark.detaudit takes card=, metrics=, standard=, step_key= only (keywords); "
                                "it does not take metric=*",
                                "*it does not take 'out/metrics.jsonl'*"])
    update(pytester, marker, "-k", "test_metrics_marker").assert_outcomes(passed=1)
    assert (project / "tests/standards/marked.json").is_file()
    run(pytester, marker, "-k", "test_metrics_marker").assert_outcomes(passed=1)
    monkeypatch.setenv("DEMO_BUMP", "0.5")  # the file the marker names is what is checked
    run(pytester, marker, "-k", "test_metrics_marker").assert_outcomes(failed=1)


@pytest.mark.slow
def test_the_marker_checks_metrics_against_a_cards_standard(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    write_card(pytester.path / "toy.toml")
    pytester.makepyfile(test_marked_card='''
import os, subprocess, sys
from pathlib import Path

import pytest

TOY = Path(os.environ["TOY_RECIPE"])

@pytest.mark.detaudit(card="toy.toml")
def test_card_run():
    pass

@pytest.mark.detaudit(card="toy.toml", metrics="m.jsonl")
def test_file_against_card():
    args = ["--steps", "4"] if os.environ.get("FOUR") else []
    subprocess.run([sys.executable, str(TOY), *args], check=True,  # the toy writes info.json into its work dir
                   env=dict(os.environ, DETAUDIT_METRICS_JSONL="m.jsonl", DETAUDIT_WORKDIR=os.getcwd()))
''')
    from conftest import TOY

    monkeypatch.setenv("TOY_RECIPE", str(TOY))
    run(pytester, "--detaudit-update", "-k", "card_run").assert_outcomes(passed=1)
    run(pytester, "-k", "file_against_card").assert_outcomes(passed=1)
    monkeypatch.setenv("FOUR", "1")  # card + metrics: the metrics file is checked, not ignored
    changed = run(pytester, "-k", "file_against_card")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*3 points in the standard, 4 in the run*"])
    assert (pytester.path / "standards" / "toy.cpu-test.obtained.jsonl").is_file()


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_long_test_names_are_cut_and_end_with_a_hash(pytester: pytest.Pytester, project: Path) -> None:
    long_names = "tests/check_long_names.py"
    update(pytester, long_names).assert_outcomes(passed=2)
    written = sorted((project / "tests/standards/check_long_names").iterdir())
    assert len(written) == 2 and len({p.name[:140] for p in written}) == 1  # one start, two hashes
    assert all(len(p.name.encode()) <= 165 and re.search(r"-[0-9a-f]{16}\.json$", p.name) for p in written)
    run(pytester, long_names).assert_outcomes(passed=2)
