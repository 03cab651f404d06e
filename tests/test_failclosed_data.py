"""Fail closed on data (issue #39's data and format parts, #38 items 3, 4 and 7): numbers read
exactly, steps that are integers, nothing compared is never a pass, miles' reserved shapes as
miles' checker sees them, `standard diff` as verify would compare, byte-exact detaudit
conversion, Megatron-LM's approximate-only series, the step key detected, a standard from
agreeing metrics files. CLI on files only: no recipe runs."""

from __future__ import annotations

import json
import math
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import run_cli, strict_json, write_jsonl
from golden_runs import cells_of, records_of
from native_checkers import megatron as megatron_verdict
from native_checkers import miles as miles_verdict

from detaudit.data.compare import diff_runs
from detaudit.data.exclusion import Exclusion
from detaudit.data.metrics import LINE_INDEX, read_metrics
from detaudit.errors import InputError, UsageError
from detaudit.standards.check import check_run
from detaudit.standards.formats import load_any, render_as
from detaudit.standards.from_metrics import standard_from_metrics

pytest_plugins = ["pytester"]
# Installed with its entry point, pytest loads the plugin itself; from a checkout it is named with -p.
PLUGIN = () if any(ep.value == "detaudit.pytest_plugin" for ep in entry_points(group="pytest11")) else (
    "-p", "detaudit.pytest_plugin")
BIG = 2**64 + 1  # 18446744073709551617: orjson reads it as the float 1.8446744073709552e19
GOLDENS = Path(__file__).parent / "fixtures" / "goldens"


def one_line_error(result, code: int = 2) -> str:
    assert result.code == code, result.text
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaudit: error: "), result.err
    assert "Traceback" not in result.text
    return lines[0]


def lines(path: Path, records: list[dict]) -> Path:
    return write_jsonl(path, [json.dumps(r) for r in records])


# --- numbers are read exactly -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [BIG, -(2**63) - 1, 10**30, -(10**25)])
def test_integers_beyond_64_bits_stay_integers(tmp_path: Path, value: int) -> None:
    path = lines(tmp_path / "m.jsonl", [{"step": 1, "n": value, "x": 0.5, "nested": [1, {"k": value}]}, {"step": 2, "n": 3, "x": 1e19}])
    run = read_metrics(path)
    assert list(run.series["n"].values) == [value, 3] and type(run.series["n"].values[0]) is int
    assert run.series["nested"].values[0] == [1, {"k": value}] and type(run.series["nested"].values[0][1]["k"]) is int
    assert list(run.series["x"].values) == [0.5, 1e19] and type(run.series["x"].values[1]) is float  # a float token stays float


def test_diff_calls_neighbouring_huge_integers_different_as_values_and_as_steps(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": 1, "n": BIG}])
    b = lines(tmp_path / "b.jsonl", [{"step": 1, "n": BIG + 1}])
    result = run_cli("diff", "--json", str(a), str(b))
    assert result.code == 1, result.text
    doc = json.loads(result.out)
    assert doc["mismatched"][0]["values"] == [BIG, BIG + 1] and doc["mismatched"][0]["kind"] == "value"
    sa = lines(tmp_path / "sa.jsonl", [{"step_key": "s", "s": BIG, "loss": 0.5}])
    sb = lines(tmp_path / "sb.jsonl", [{"step_key": "s", "s": BIG + 1, "loss": 0.5}])
    steps = run_cli("diff", "--json", str(sa), str(sb))
    assert steps.code == 1, steps.text
    assert json.loads(steps.out)["mismatched"][0]["kind"] == "steps"
    assert json.loads(steps.out)["mismatched"][0]["by_run"][0]["step"] == BIG


def test_a_float_token_beyond_a_floats_range_is_refused_not_read_as_infinity(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"step": 1, "x": 1e400}\n')
    b = tmp_path / "b.jsonl"
    b.write_text('{"step": 1, "x": 2e400}\n')
    error = one_line_error(run_cli("diff", str(a), str(b)))
    assert error.startswith(f"detaudit: error: {a}:1: ") and "1e400 is beyond the range of a 64-bit float" in error
    literal = tmp_path / "inf.jsonl"
    literal.write_text('{"step": 1, "x": Infinity, "y": -1e308}\n')  # Python's own infinity literal still reads
    assert run_cli("diff", str(literal), str(literal)).code == 0


@pytest.mark.parametrize("token", ["1e-400", "2.4e-324", "-1E-0400", "0." + "0" * 330 + "1", "0.0000001e-320"])
def test_a_float_token_too_small_for_a_float_is_refused_not_read_as_zero(tmp_path: Path, token: str) -> None:
    """1e-400 and 2e-400 both read as 0.0: compared, two different numbers were called identical."""
    a = tmp_path / "a.jsonl"
    a.write_text('{"step": 0, "x": 0.0, "lr": 1e-05}\n{"step": 1, "x": %s}\n' % token)
    b = tmp_path / "b.jsonl"
    b.write_text('{"step": 0, "x": 0.0, "lr": 1e-05}\n{"step": 1, "x": 0.0}\n')
    error = one_line_error(run_cli("diff", str(a), str(b)))
    assert error == (f"detaudit: error: {a}:2: number {token} is too small for a 64-bit float (it would read as 0.0, "
                     "as would other numbers)"), error
    step = tmp_path / "step.jsonl"
    step.write_text('{"step": %s, "x": 1.0}\n' % token)  # a step too: it would be step 0
    assert one_line_error(run_cli("diff", str(step), str(step))).startswith(f"detaudit: error: {step}:1: number ")
    std = tmp_path / "std.json"
    std.write_text('{"schema": "detaudit/standard/1", "series": {"x": {"step_key": "step", "points": [[1, %s]]}}}'
                   % token)
    error = one_line_error(run_cli("verify", "--metrics", str(b), "--standard", str(std)))
    assert error.startswith(f"detaudit: error: {std}: ") and "too small for a 64-bit float" in error, error


@pytest.mark.parametrize("clip", ["0.0", "0.5"])  # a float 0.0 on every line (one pass over the bytes), or on one
def test_a_too_small_token_deep_in_a_long_file_is_named_by_its_line(tmp_path: Path, clip: str) -> None:
    """Past the reader's checkpoints (every 8,192 lines), blank lines included, the line number is exact."""
    rows = []
    for step in range(30000):
        rows.append('{"step": %d, "loss": %s, "clip": %s, "lr": 1e-05}\n' % (step, 1.5 + step, clip))
        if step % 1000 == 7:
            rows.append("\n")
    bad_at = 25000 + 25000 // 1000 + 1  # the line of step 25000 (1-based), after the blank lines before it
    assert rows[bad_at - 1].startswith('{"step": 25000,')
    rows[bad_at - 1] = '{"step": 25000, "loss": 1e-400, "clip": %s, "lr": 1e-05}\n' % clip
    run = tmp_path / "run.jsonl"
    run.write_text("".join(rows))
    error = one_line_error(run_cli("diff", str(run), str(run)))
    assert error.startswith(f"detaudit: error: {run}:{bad_at}: number 1e-400 is too small"), error
    rows[bad_at - 1] = '{"step": 25000, "loss": 0.0, "clip": %s, "lr": 1e-05}\n' % clip
    run.write_text("".join(rows))
    assert read_metrics(run).series["loss"].values.count(0.0) == 1


def test_an_integer_past_pythons_digit_limit_is_refused_in_detaudits_words(tmp_path: Path) -> None:
    digits = "9" * 5000
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 1, "x": 1}\n{"step": 2, "x": %s}\n' % digits)
    std = tmp_path / "std.json"
    std.write_text('{"schema": "detaudit/standard/1", "series": {"x": {"step_key": "step", "points": [[1, %s]]}}}'
                   % digits)
    words = ("invalid JSON: an integer of 5000 digits: detaudit reads integers of up to 4300 digits (Python's limit "
             "on converting them safely)")
    assert one_line_error(run_cli("diff", str(run), str(run))) == f"detaudit: error: {run}:2: {words}"
    assert one_line_error(run_cli("verify", "--metrics", str(run), "--standard", str(std))) == \
        f"detaudit: error: {std}: {words}"


def test_zeros_and_small_floats_a_float_holds_still_read(tmp_path: Path) -> None:
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_text('{"step": 0, "x": 0.0, "y": -0.0, "z": 0e-500, "w": 0.000e+10, "lr": 1e-05, "tiny": 5e-324}\n'
                     '{"step": 1, "x": 0, "y": 1e-300, "z": 0.0, "w": 0.0, "lr": 2.5e-308, "tiny": 4.9e-324}\n')
    run = read_metrics(zeros)
    assert list(run.series["tiny"].values) == [5e-324, 5e-324] and run.series["y"].values[1] == 1e-300
    assert run_cli("diff", str(zeros), str(zeros)).code == 0


def test_verify_does_not_pass_an_integer_run_against_a_float_standard(tmp_path: Path) -> None:
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {
        "n": {"step_key": "step", "points": [[1, float(BIG)]]}}}))
    run = lines(tmp_path / "run.jsonl", [{"step": 1, "n": BIG}])
    result = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert result.code == 1 and "FAILED" in result.out, result.text
    miles = tmp_path / "miles.json"
    miles.write_text(json.dumps({"meta": {}, "metrics": {"n": [[1, float(BIG)]]}}))
    # miles' own check compares with ==: 18446744073709551617 == 1.8446744073709552e19 is False
    assert not miles_verdict(miles.read_text(), [{"step_key": "step", "step": 1, "n": BIG}])
    assert run_cli("verify", "--metrics", str(run), "--standard", str(miles)).code == 1


def test_a_standard_from_metrics_stores_the_integer(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": 1, "n": BIG, "loss": 0.5}, {"step": 2, "n": BIG + 2, "loss": 0.25}])
    b = lines(tmp_path / "b.jsonl", [{"step": 1, "n": BIG, "loss": 0.5}, {"step": 2, "n": BIG + 2, "loss": 0.25}])
    made = standard_from_metrics([a, b], name="toy")
    assert made.standard is not None
    text = render_as(made.standard, "detaudit")
    assert f"[1, {BIG}]" in text and f"[2, {BIG + 2}]" in text
    std = tmp_path / "std.json"
    std.write_text(text)
    assert load_any(std).series["n"].values == [BIG, BIG + 2]
    off = lines(tmp_path / "off.jsonl", [{"step": 1, "n": BIG + 1, "loss": 0.5}, {"step": 2, "n": BIG + 2, "loss": 0.25}])
    assert run_cli("verify", "--metrics", str(a), "--standard", str(std)).code == 0
    assert run_cli("verify", "--metrics", str(off), "--standard", str(std)).code == 1


# --- steps are integers -----------------------------------------------------------------------------


@pytest.mark.parametrize(("step", "words"), [
    ("true", "got true, a boolean"), ("false", "got false, a boolean"), ("1.5", "got 1.5, a fraction"),
    ('"3"', "got a string"), ("null", "got null"), ("NaN", "got NaN"), ("[1]", "got an array"),
])
def test_a_step_must_be_an_integer(tmp_path: Path, step: str, words: str) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"step_key": "s", "s": 0, "x": 1.0}', f'{{"step_key": "s", "s": {step}, "x": 2.0}}'])
    with pytest.raises(InputError, match=r"m\.jsonl:2: step 's' must be an integer") as err:
        read_metrics(path)
    assert words in str(err.value)
    detected = write_jsonl(tmp_path / "d.jsonl", ['{"step": 0, "x": 1.0}', f'{{"step": {step}, "x": 2.0}}'])
    error = one_line_error(run_cli("diff", str(detected), str(detected)))
    assert "d.jsonl:2: step 'step' must be an integer" in error and "--step-key" in error


def test_an_integral_float_step_is_kept_as_written(tmp_path: Path) -> None:
    run = read_metrics(write_jsonl(tmp_path / "m.jsonl", ['{"step_key": "s", "s": 3.0, "x": 1.0}']))
    assert run.series["x"].steps(run) == [3.0] and type(run.series["x"].steps(run)[0]) is float


def _golden_run_with_boolean_steps(tmp_path: Path, fmt: str) -> tuple[Path, Path]:
    golden = {
        "torchtitan": ("golden.txt", "0 8.5\n1 7.25\n"),
        "nemo": ("golden.json", json.dumps({"loss": {"0": 8.5, "1": 7.25}}, indent=2)),
        "megatron": ("golden.json", json.dumps({"loss": {"start_step": 0, "end_step": 1, "step_interval": 1,
                                                         "values": {"0": 8.5, "1": 7.25}}}, indent=4)),
    }[fmt]
    std = tmp_path / golden[0]
    std.write_text(golden[1])
    run = write_jsonl(tmp_path / "run.jsonl", ['{"step_key": "s", "s": false, "loss": 8.5}',
                                               '{"step_key": "s", "s": true, "loss": 7.25}'])
    return std, run


@pytest.mark.parametrize("fmt", ["torchtitan", "nemo", "megatron"])
def test_boolean_steps_never_pass_as_steps_0_and_1(tmp_path: Path, fmt: str) -> None:
    std, run = _golden_run_with_boolean_steps(tmp_path, fmt)
    error = one_line_error(run_cli("verify", "--metrics", str(run), "--standard", str(std)))
    assert "run.jsonl:1: step 's' must be an integer, got false, a boolean" in error


# --- the step key is detected -----------------------------------------------------------------------


def test_the_step_key_is_detected_in_order_and_named(tmp_path: Path) -> None:
    path = lines(tmp_path / "m.jsonl", [{"epoch": 0, "iteration": 10, "step": 100, "loss": 0.5},
                                        {"epoch": 0, "iteration": 20, "step": 200, "loss": 0.25}])
    run = read_metrics(path)
    assert run.series["loss"].step_key == "step" and run.series["loss"].steps(run) == [100, 200]
    assert "step" not in run.series and set(run.series) == {"loss", "epoch", "iteration"}
    assert run.detected_step_keys == ["step"]
    for key, expected in (("iteration", [10, 20]), ("global_step", [7, 8]), ("_step", [7, 8]), ("epoch", [7, 8])):
        only = lines(tmp_path / f"{key}.jsonl", [{key: v, "loss": 0.5} for v in expected]
                     if key != "iteration" else [{"iteration": v, "epoch": 0, "loss": 0.5} for v in expected])
        got = read_metrics(only)
        assert got.series["loss"].step_key == key and got.series["loss"].steps(got) == expected, key
    # a flag (or a card) still chooses
    chosen = read_metrics(path, default_step_key="iteration")
    assert chosen.series["loss"].steps(chosen) == [10, 20] and chosen.detected_step_keys == [] and "step" in chosen.series
    # a null step_key is no step key: the option's, else detected
    null = lines(tmp_path / "null.jsonl", [{"step_key": None, "it": 5, "step": 1, "loss": 0.5}])
    assert read_metrics(null, default_step_key="it").series["loss"].step_key == "it"
    assert read_metrics(null).series["loss"].step_key == "step"
    # no candidate: line numbers, as before
    plain = read_metrics(lines(tmp_path / "plain.jsonl", [{"loss": 0.5}, {"loss": 0.25}]))
    assert plain.series["loss"].step_key == LINE_INDEX and plain.series["loss"].steps(plain) == [0, 1]
    table = run_cli("diff", str(path), str(path))
    assert table.code == 0 and "steps: field 'step', detected" in table.out
    assert json.loads(run_cli("diff", "--json", str(path), str(path)).out)["detected_step_keys"] == ["step"]
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {
        "loss": {"step_key": "step", "points": [[100, 0.5], [200, 0.25]]}}}))
    verified = run_cli("verify", "--metrics", str(path), "--standard", str(std))
    assert verified.code == 0 and "steps: field 'step', detected" in verified.out, verified.text
    doc = json.loads(run_cli("verify", "--metrics", str(path), "--standard", str(std), "--json").out)
    assert doc["detected_step_keys"] == ["step"]


def test_a_standard_recorded_before_detection_still_verifies(tmp_path: Path) -> None:
    # recorded from lines naming no step_key before step keys were detected: steps are line numbers
    # and `step` is a series (the pytest plugin wrote such files)
    std = tmp_path / "old.json"
    std.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {
        "loss": {"step_key": LINE_INDEX, "points": [[0, 0.5], [1, 0.25]]},
        "step": {"step_key": LINE_INDEX, "points": [[0, 10], [1, 20]]}}}))
    run = lines(tmp_path / "run.jsonl", [{"step": 10, "loss": 0.5}, {"step": 20, "loss": 0.25}])
    result = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert result.code == 0 and "2 metric series match" in result.out, result.text
    off = lines(tmp_path / "off.jsonl", [{"step": 10, "loss": 0.5}, {"step": 21, "loss": 0.25}])
    assert run_cli("verify", "--metrics", str(off), "--standard", str(std)).code == 1


def test_a_standard_from_step_metrics_has_no_step_series_and_no_line_steps(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": s, "loss": 1 / (s + 1)} for s in range(3)])
    made = standard_from_metrics([a, a], name="toy")
    assert made.standard is not None and set(made.standard.series) == {"loss"}
    text = render_as(made.standard, "detaudit")
    assert '"step_key": "step"' in text and LINE_INDEX not in text


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_pytest_plugin_stores_steps_and_integers(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "BUMP"):
        monkeypatch.delenv(name, raising=False)  # this suite may run in CI, where updates are refused
    pytester.makepyfile(test_m=f'''
import json, os

def test_metrics(detaudit, tmp_path):
    path = tmp_path / "m.jsonl"
    n = {BIG} + int(os.environ.get("BUMP", "0"))
    path.write_text("".join(json.dumps({{"step": s, "loss": 0.5 / (s + 1), "tokens": n + s}}) + "\\n" for s in range(3)))
    detaudit.verify_metrics(path)
''')
    pytester.runpytest(*PLUGIN, "--detaudit-update").assert_outcomes(passed=1)
    (standard,) = (pytester.path / "standards").rglob("*.json")
    doc = json.loads(standard.read_text())
    assert set(doc["series"]) == {"loss", "tokens"} and doc["series"]["tokens"]["step_key"] == "step"
    assert doc["series"]["tokens"]["points"][0] == [0, BIG] and LINE_INDEX not in standard.read_text()
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    monkeypatch.setenv("BUMP", "1")
    pytester.runpytest(*PLUGIN).assert_outcomes(failed=1)


# --- nothing compared is never a pass ---------------------------------------------------------------


def test_diff_that_compared_nothing_fails_and_says_why(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": 1, "loss": 0.5, "perf/t": 1.0}])
    b = lines(tmp_path / "b.jsonl", [{"step": 1, "loss": 0.75, "perf/t": 2.0}])
    error = one_line_error(run_cli("diff", "--exclude", "*", str(a), str(b)))
    assert "nothing to compare: every series is left out" in error and "--exclude '*'" in error
    perf = lines(tmp_path / "perf.jsonl", [{"step": 1, "perf/t": 1.0, "perf/u": 2.0}])
    error = one_line_error(run_cli("diff", str(perf), str(perf)))
    assert "2 by default wall-clock pattern 'perf/*'" in error
    steps = lines(tmp_path / "steps.jsonl", [{"step": 1}, {"step": 2}])
    assert "the files hold no series (only the step field 'step'" in one_line_error(run_cli("diff", str(steps), str(steps)))
    keyed = lines(tmp_path / "keyed.jsonl", [{"step_key": "s", "s": 1}])
    assert "no series" in one_line_error(run_cli("diff", "--json", str(keyed), str(keyed)))
    # a file with series left to compare still exits 0 or 1
    assert run_cli("diff", "--exclude", "perf/*", str(a), str(a)).code == 0


def test_verify_that_would_compare_nothing_is_an_error(tmp_path: Path) -> None:
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {
        "a": {"step_key": "s", "points": [[1, 0.5]]}, "b": {"step_key": "s", "points": [[1, 0.5]]}}}))
    run = lines(tmp_path / "run.jsonl", [{"step_key": "s", "s": 1, "a": 0.5, "b": 0.5}])
    error = one_line_error(run_cli("verify", "--metrics", str(run), "--standard", str(std), "--exclude", "*"))
    assert "nothing to compare: every one of the standard's 2 series is left out (2 by --exclude '*')" in error


def test_standard_diff_of_two_standards_without_series_compared_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"metrics": {}}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {}}))
    for old, new in ((empty, empty), (empty, other)):
        error = one_line_error(run_cli("standard", "diff", str(old), str(new)))
        assert f"nothing to compare: neither {old} nor {new} holds a series" in error
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"metrics": {"loss": [[1, 0.5]]}}))
    assert run_cli("standard", "diff", str(empty), str(one)).code == 1  # a series added: a change, not nothing


# --- miles: its reserved shapes as its own checker sees them ------------------------------------------


@pytest.mark.parametrize(("value", "run_value"), [
    ({"float": "NaN"}, math.nan), ({"float": "Infinity"}, math.inf), ("NaN", math.nan), (None, 0.0),
    ([0.5], 0.5), (10**400, 1e308), (None, None), ("x", "x"), ([0.5], [0.5]), (10**400, 10**400),
])
def test_miles_values_follow_miles_checker(tmp_path: Path, value, run_value) -> None:
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"meta": {}, "metrics": {"grad_norm": [[1, 0.5], [2, value]]}}, indent=2, sort_keys=True) + "\n")
    records = [{"step_key": "s", "s": 1, "grad_norm": 0.5}, {"step_key": "s", "s": 2, "grad_norm": run_value}]
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps(r) for r in records])
    assert not miles_verdict(std.read_text(), records)  # math.isnan raises on it: miles' test fails
    result = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert result.code == 1 and "FAILED" in result.out and "grad_norm" in result.out, result.text


def test_miles_nan_literal_still_matches_nan(tmp_path: Path) -> None:
    std = tmp_path / "std.json"
    std.write_text('{\n  "meta": {},\n  "metrics": {\n    "g": [\n      [\n        1,\n        NaN\n      ]\n    ]\n  }\n}\n')
    records = [{"step_key": "s", "s": 1, "g": math.nan}]
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps(r) for r in records])
    assert miles_verdict(std.read_text(), records)
    assert run_cli("verify", "--metrics", str(run), "--standard", str(std)).code == 0


def test_a_miles_reserved_shape_is_not_converted_into_a_nan(tmp_path: Path) -> None:
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"meta": {}, "metrics": {"g": [[1, {"float": "NaN"}]]}}, indent=2, sort_keys=True) + "\n")
    assert load_any(std).series["g"].values == [{"float": "NaN"}]
    error = one_line_error(run_cli("standard", "convert", str(std), str(tmp_path / "d.json"), "--format", "detaudit"))
    assert "cannot hold series 'g' exactly" in error and not (tmp_path / "d.json").exists()


# --- standard diff compares as verify would ----------------------------------------------------------


def _detaudit_standard(path: Path, points: list) -> Path:
    path.write_text(json.dumps({"schema": "detaudit/standard/1", "series": {"x": {"step_key": "s", "points": points}}}))
    return path


def test_standard_diff_is_not_identical_when_verify_would_fail_one(tmp_path: Path) -> None:
    old = _detaudit_standard(tmp_path / "old.json", [[1, 0.5], [2, 0.25]])
    new = _detaudit_standard(tmp_path / "new.json", [[2, 0.25], [1, 0.5]])
    run = lines(tmp_path / "run.jsonl", [{"step_key": "s", "s": 1, "x": 0.5}, {"step_key": "s", "s": 2, "x": 0.25}])
    assert run_cli("verify", "--metrics", str(run), "--standard", str(old)).code == 0
    assert run_cli("verify", "--metrics", str(run), "--standard", str(new)).code == 1
    review = run_cli("standard", "diff", str(old), str(new))
    assert review.code == 1 and "points in another order from step 1" in review.out, review.text
    doc = json.loads(run_cli("standard", "diff", "--json", str(old), str(new)).out)
    assert not doc["identical"] and doc["series"][0]["reordered_at"] == 1
    # a repeated point counts each time
    twice = _detaudit_standard(tmp_path / "twice.json", [[1, 0.5], [1, 0.5], [2, 0.25]])
    assert run_cli("standard", "diff", str(old), str(twice)).code == 1
    assert run_cli("standard", "diff", str(old), str(old)).code == 0


# --- detaudit -> detaudit: byte-identical or refused ----------------------------------------------------


def test_detaudit_to_detaudit_is_byte_identical_or_refused(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": 1, "loss": 0.5}])
    made = standard_from_metrics([a, a], name="toy")
    assert made.standard is not None
    canonical = tmp_path / "canonical.json"
    canonical.write_text(render_as(made.standard, "detaudit"))
    out = tmp_path / "out.json"
    assert run_cli("standard", "convert", str(canonical), str(out), "--format", "detaudit").code == 0
    assert out.read_bytes() == canonical.read_bytes()
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(json.loads(canonical.read_text())))
    target = tmp_path / "target.json"
    error = one_line_error(run_cli("standard", "convert", str(compact), str(target), "--format", "detaudit"))
    assert "byte layout is not one detaudit reproduces" in error and not target.exists()


# --- Megatron-LM: the series its checker compares only approximately ---------------------------------


MEGATRON_WITH_TIMERS = GOLDENS / "megatron" / "bert__bert_mcore_tp1_pp2__golden_values_dev_dgx_h100.json"


def test_megatron_leaves_out_what_its_checker_compares_only_approximately(tmp_path: Path) -> None:
    text = MEGATRON_WITH_TIMERS.read_text()
    cells = cells_of("megatron", text)
    assert {"iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"} <= set(cells)
    # the run logs the golden's deterministic series, and timers and memory off by 3 %
    records = records_of("megatron", text, {n: (c if n in ("lm loss", "num-zeros") else [(s, v * 1.03) for s, v in c])
                                            for n, c in cells.items()})
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps(r) for r in records])
    deterministic = json.dumps({k: v for k, v in json.loads(text).items() if k in ("lm loss", "num-zeros")})
    assert megatron_verdict(deterministic, records)  # Megatron's Deterministic test (METRICS default) passes
    check = check_run(load_any(MEGATRON_WITH_TIMERS), run)
    assert check.failures == [] and check.compared == 2
    assert sorted(check.left_out) == ["iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"]
    assert "the megatron format's rule 'mem-*': Megatron-LM checks it only approximately" in check.left_out["mem-allocated-bytes"]
    result = run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON_WITH_TIMERS), "--json")
    assert result.code == 0, result.text
    doc = strict_json(result.out)
    assert sorted(doc["left_out"]) == ["iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"]
    # --include takes one back: then it is compared exactly, and the 3 % fails it
    back = run_cli("verify", "--metrics", str(run), "--standard", str(MEGATRON_WITH_TIMERS), "--include", "iteration-time")
    assert back.code == 1 and "iteration-time" in back.out
    # the same verdict through a detaudit conversion (the rule travels with "comparison")
    converted = tmp_path / "converted.json"
    assert run_cli("standard", "convert", str(MEGATRON_WITH_TIMERS), str(converted), "--format", "detaudit").code == 0
    assert run_cli("verify", "--metrics", str(run), "--standard", str(converted)).code == 0


def test_a_megatron_golden_of_timers_alone_compares_nothing(tmp_path: Path) -> None:
    std = tmp_path / "golden.json"
    std.write_text(json.dumps({"iteration-time": {"start_step": 1, "end_step": 2, "step_interval": 1,
                                                  "values": {"1": 1.5, "2": 1.25}}}, indent=4))
    run = write_jsonl(tmp_path / "run.jsonl", ['{"step_key": "i", "i": 1, "iteration-time": 1.5}'])
    error = one_line_error(run_cli("verify", "--metrics", str(run), "--standard", str(std)))
    assert "nothing to compare" in error and "megatron format's rule 'iteration-time'" in error


# --- metrics files: not a standard, and a standard from agreeing ones -------------------------------------


def test_convert_of_a_metrics_jsonl_says_what_it_is(tmp_path: Path) -> None:
    metrics = lines(tmp_path / "m.jsonl", [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}])
    error = one_line_error(run_cli("standard", "convert", str(metrics), str(tmp_path / "o.json"), "--format", "detaudit"))
    assert "a metrics JSONL file (2 lines, one JSON object each), not a standard" in error
    assert "Extra data" not in error and "record --metrics" in error
    one = lines(tmp_path / "one.jsonl", [{"step": 1, "loss": 0.5}])
    assert "one line of metrics" in one_line_error(run_cli("standard", "show", str(one)))


def test_a_standard_from_metrics_files_needs_agreeing_runs(tmp_path: Path) -> None:
    a = lines(tmp_path / "a.jsonl", [{"step": s, "loss": 1 / (s + 1), "perf/t": s * 1.5} for s in range(3)])
    b = lines(tmp_path / "b.jsonl", [{"step": s, "loss": 1 / (s + 1), "perf/t": s * 2.5} for s in range(3)])
    c = lines(tmp_path / "c.jsonl", [{"step": s, "loss": 1 / (s + 2), "perf/t": 0.0} for s in range(3)])
    made = standard_from_metrics([a, b], name="toy")
    assert made.agreed and made.standard is not None and set(made.standard.series) == {"loss"}
    assert made.standard.excluded["series"] == {"perf/t": "default wall-clock pattern 'perf/*'"}
    again = standard_from_metrics([a, b], name="toy")
    assert again.standard is not None
    assert render_as(made.standard, "detaudit") == render_as(again.standard, "detaudit")  # same input, same bytes
    disagree = standard_from_metrics([a, c], name="toy")
    assert disagree.standard is None and [m.series for m in disagree.report.mismatched] == ["loss"]
    with pytest.raises(UsageError, match="two or more metrics files"):
        standard_from_metrics([a])
    with pytest.raises(InputError, match="nothing to compare"):
        standard_from_metrics([a, b], exclusion=Exclusion(cli=("*",)))
    miles = standard_from_metrics([a, b], fmt="miles")
    assert miles.standard is not None and miles.standard.format == "miles"
    assert diff_runs(made.runs).ok


def test_record_metrics_builds_what_the_library_builds(tmp_path: Path) -> None:
    """`record --metrics` (the flow) and `standard_from_metrics` (the library) build one standard:
    the same series, exclusions and dropped-series record; a file name that is not UTF-8 is named
    escaped, never a refusal to write."""
    a = lines(tmp_path / "a.jsonl", [{"step": s, "loss": 1 / (s + 1), "n": BIG + s, "perf/t": s * 1.5} for s in range(3)])
    odd = tmp_path / os.fsdecode(b"b\xff.jsonl")
    odd.write_bytes(a.read_bytes().replace(b"1.5", b"2.5"))
    out = tmp_path / "std.json"
    result = run_cli("record", "--metrics", str(a), str(odd), "--out", str(out))
    assert result.code == 0, result.text
    written = json.loads(out.read_text())
    made = standard_from_metrics([a, odd], name="std")
    assert made.standard is not None
    library = json.loads(render_as(made.standard, "detaudit"))
    for key in ("series", "excluded", "name"):
        assert written[key] == library[key], key
    assert written["recorded"]["metrics"] == [str(a), str(tmp_path / "b\\xff.jsonl")]
