"""Fail closed on malformed standards (issue #25): a one-line error and exit 2, never a traceback,
never a pass. Each case failed (a traceback) before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, write_card, write_jsonl

DETAUDIT = {"schema": "detaudit/standard/1", "name": "toy", "runner": {}, "recorded": {}, "excluded": {},
            "series": {"a": {"step_key": "s", "points": [[1, 0.5]]}}}


def one_line_error(result, path: Path, words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.code == 2, result.text
    assert result.err.startswith(f"detaudit: error: {path}") and result.err.count("\n") == 1, result.err
    assert words in result.err and "Traceback" not in result.err and result.out == ""


@pytest.mark.parametrize(("change", "words"), [
    ({"name": 5}, '"name" must be a string, got int'),
    ({"runner": {"class": ["cpu", 3]}}, "runner.class"),
    ({"runner": {"class": "cpu"}}, "runner.class must be a list of strings"),
    ({"excluded": {"series": ["a"]}}, "excluded.series must be an object"),
    ({"excluded": {"patterns": ["x"]}}, "excluded.patterns must be an object"),
    ({"dropped": {"a": 3}}, "dropped.a must be an object"),
    ({"comparison": "exactish"}, "comparison 'exactish' is not a format's rule"),
    ({"native": {"format": "megatron", "series": {"a": {"start_step": "1"}}}}, "native: not what a Megatron-LM golden"),
    ({"rename": {"x": "x"}}, "rename: 'x' is renamed to itself"),
    ({"value_precision": 5}, "unknown key 'value_precision'"),
])
@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_show_of_a_malformed_detaudit_standard(tmp_path: Path, change: dict, words: str, json_flag: tuple) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**DETAUDIT, **change}))
    one_line_error(run_cli("standard", "show", *json_flag, str(path)), path, words)


def test_show_of_a_miles_standard_with_malformed_meta(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"meta": {"dropped_nan_series": 3}, "metrics": {"a": [[1, 0.5]]}}')
    one_line_error(run_cli("standard", "show", str(path)), path, "meta.dropped_nan_series must be a list")
    nan = tmp_path / "nan.json"
    nan.write_text('{"meta": {"commit": "abc", "score": NaN}, "metrics": {"a": [[1, 0.5]]}}')
    assert run_cli("standard", "show", str(nan)).code == 0  # people can read it
    one_line_error(run_cli("standard", "show", "--json", str(nan)), nan, "meta.score is NaN or infinite")


def test_diff_with_integers_beyond_float_range(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text('{"meta": {}, "metrics": {"a": [[1, %d], [2, 1]]}}' % 10 ** 400)
    new.write_text('{"meta": {}, "metrics": {"a": [[1, %d], [2, 1]]}}' % (2 * 10 ** 400))
    result = run_cli("standard", "diff", str(old), str(new))
    assert result.code == 1 and "Traceback" not in result.err, result.text
    assert "series: 1 changed, 0 added, 0 removed, 0 identical" in result.out
    doc = json.loads(run_cli("standard", "diff", "--json", str(old), str(new)).out)
    change = doc["series"][0]
    assert change["differing_points"] == 1 and change["first_step"] == 1 and change["max_abs_diff"] is None
    assert change["first_values"] == [10 ** 400, 2 * 10 ** 400]


@pytest.mark.slow
def test_verify_with_a_runner_class_that_is_not_strings(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps({"step_key": "s", "s": 1, "a": 0.5})])
    for cls in (["cpu", 3], "cpu", [], [None]):
        path = tmp_path / "s.json"
        path.write_text(json.dumps({**DETAUDIT, "runner": {"class": cls}}))
        one_line_error(run_cli("verify", "--metrics", str(run), "--standard", str(path)), path, "runner.class")
    card = write_card(tmp_path / "toy.toml")  # its standard is standards/toy.cpu-test.json: a bad class there
    standards = tmp_path / "standards"
    standards.mkdir()
    bad = standards / "toy.cpu-test.json"
    bad.write_text(json.dumps({**DETAUDIT, "runner": {"class": ["cpu", 3]}}))
    one_line_error(run_cli("verify", str(card)), bad, "runner.class")
