"""Reading metrics JSONL: series, steps, types, and every bad input named in the spec."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from conftest import run_cli, write_jsonl

from detaudit.errors import InputError
from detaudit.data.exclusion import Exclusion
from detaudit.data.metrics import LINE_INDEX, TornLineWarning, read_metrics


def test_interleaved_step_keys_and_types(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [
        '{"step_key": "rollout/step", "rollout/step": 0, "rollout/r": 0.5, "perf/t": 1.0, "s": "x"}',
        '{"step_key": "train/step", "train/step": 1.0, "train/loss": NaN, "train/n": 3, "flag": true, "z": null}',
        '{"step_key": "rollout/step", "rollout/step": 1, "rollout/r": Infinity, "perf/t": 2.0, "s": "y"}',
        '{"step_key": "train/step", "train/step": 2.0, "train/loss": -Infinity, "train/n": 4, "flag": false, "z": null, "rollout/step": 1}',
    ])
    run = read_metrics(path, exclusion=Exclusion())
    assert set(run.series) == {"rollout/r", "s", "train/loss", "train/n", "flag", "z"}  # step keys are no series
    r = run.series["rollout/r"]
    assert r.step_key == "rollout/step"
    assert r.steps(run) == [0, 1]
    assert list(r.values) == [0.5, math.inf]
    loss = run.series["train/loss"]
    assert loss.steps(run) == [1.0, 2.0] and type(loss.steps(run)[0]) is float
    assert math.isnan(loss.values[0]) and loss.values[1] == -math.inf
    assert list(run.series["train/n"].values) == [3, 4] and type(run.series["train/n"].values[0]) is int
    assert list(run.series["flag"].values) == [True, False]
    assert list(run.series["z"].values) == [None, None]
    assert run.excluded == {"perf/t": "default wall-clock pattern 'perf/*'"}


def test_lines_without_step_key_use_default_or_line_index(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"it": 5, "a": 1.5}', '{"it": 6, "a": 2.5}'])
    run = read_metrics(path)
    assert run.series["a"].step_key == LINE_INDEX and run.series["a"].steps(run) == [0, 1]
    assert "it" in run.series
    run = read_metrics(path, default_step_key="it")
    assert run.series["a"].steps(run) == [5, 6] and "it" not in run.series


def test_torn_last_line_is_a_warning_and_dropped(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step_key": "s", "s": 0, "a": 1.0}\n{"step_key": "s", "s": 1, "a": 2.0}\n{"step_key": "s", "s": 2, "a"')
    with pytest.warns(TornLineWarning, match=r"m.jsonl:3"):
        run = read_metrics(path)
    assert run.torn_last_line and list(run.series["a"].values) == [1.0, 2.0]


@pytest.mark.parametrize(
    ("lines", "raw", "expected"),
    [
        (['{"a": 1}', '{"a": 2', '{"a": 3}'], None, r"m\.jsonl:2: invalid JSON"),
        (['{"a": 1}', "[1, 2]"], None, r"m\.jsonl:2: expected a JSON object, got an array"),
        (['{"a": 1}', '"text"'], None, r"m\.jsonl:2: expected a JSON object, got a string"),
        (['{"a": 1}', "null"], None, r"m\.jsonl:2: expected a JSON object, got null"),
        (['{"step_key": "s", "s": 0, "a": 1}', '{"step_key": "s", "a": 2}'], None, r"m\.jsonl:2: step field 's' is missing"),
        ([], "", r"m\.jsonl: empty metrics file"),
        ([], "\n\n", r"m\.jsonl: empty metrics file"),
        ([], '{"a": 1}\n{"a": 2\n', r"m\.jsonl:2: invalid JSON"),  # bad last line *with* newline: not torn
        ([], b'{"a": 1}\n{"a": "\xff"}\n', r"m\.jsonl:2: line is not valid utf-8"),
    ],
)
def test_bad_input_is_one_error_with_file_and_line(tmp_path: Path, lines, raw, expected) -> None:
    path = tmp_path / "m.jsonl"
    if raw is None:
        write_jsonl(path, lines)
    elif isinstance(raw, bytes):
        path.write_bytes(raw)
    else:
        path.write_text(raw)
    with pytest.raises(InputError, match=expected):
        read_metrics(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.jsonl: cannot read metrics file"):
        read_metrics(tmp_path / "nope.jsonl")


def test_cli_bad_input_exit_2_one_line(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", ['{"a": 1}'])
    bad = write_jsonl(tmp_path / "bad.jsonl", ['{"a": 1}', "{oops", '{"a": 3}'])
    result = run_cli("diff", str(good), str(bad))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaudit: error: ") and "bad.jsonl:2:" in lines[0]
    assert result.out == ""


def test_cli_torn_line_warns_and_compares(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"a": 1.0}', '{"a": 2.0}'])
    b = tmp_path / "b.jsonl"
    b.write_text('{"a": 1.0}\n{"a": 2.0}\n{"a": 3')
    result = run_cli("diff", str(a), str(b))
    assert result.code == 0, result.text
    assert "warning" in result.err and "b.jsonl:3" in result.err


def test_exclusion_include_and_card_patterns() -> None:
    ex = Exclusion(card=("debug/*",), cli=("x",), include=("perf/keep",))
    assert ex.reason("perf/rollout_time") == "default wall-clock pattern 'perf/*'"
    assert ex.reason("perf/keep") is None
    assert ex.reason("debug/a") == "card exclude 'debug/*'"
    assert ex.reason("x") == "--exclude 'x'"
    assert ex.reason("train/nft_t_mean") is None  # '*_time' must not catch '_t_mean'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ex.reason("rollout/step_time") is not None


def test_blank_lines_keep_file_line_numbers(tmp_path: Path) -> None:
    from detaudit.data.compare import diff_runs

    a = write_jsonl(tmp_path / "a.jsonl", ['{"x": 1.0}', "", "", '{"x": 2.0}', '{"x": 3.0}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"x": 1.0}', '{"x": 2.0}', '{"x": 4.0}'])
    run = read_metrics(a)
    assert [run.line_number(i) for i in range(3)] == [1, 4, 5]
    report = diff_runs([run, read_metrics(b)])
    assert report.root is not None and report.root.line == 5


def test_type_change_after_many_float_rows_keeps_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import detaudit.data.metrics as metrics

    monkeypatch.setattr(metrics, "ROWS_PER_FLUSH", 3)
    lines = [f'{{"a": {i}.5, "b": {i}.25}}' for i in range(7)] + ['{"a": 7, "b": null}', '{"a": 8.5, "b": 1.0}']
    run = read_metrics(write_jsonl(tmp_path / "m.jsonl", lines))
    a = run.series["a"].values
    assert type(a) is list and [type(v) for v in a] == [float] * 7 + [int, float]
    assert list(a) == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7, 8.5]
    assert run.series["b"].values[7] is None


def test_parallel_reading_matches_and_reports_errors(tmp_path: Path) -> None:
    from detaudit.data.metrics import read_metrics_many

    a = write_jsonl(tmp_path / "a.jsonl", ['{"step_key": "s", "s": 0, "x": 0.5, "n": 3}', '{"step_key": "s", "s": 1, "x": NaN, "n": 4}'])
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"step_key": "s", "s": 0, "x": 0.5, "n": 3}\n{"step_key"')
    serial = read_metrics_many([a, a], parallel=False)
    with pytest.warns(TornLineWarning, match="torn.jsonl:2"):
        parallel = read_metrics_many([a, a, torn], parallel=True)
    assert [list(r.series["n"].values) for r in parallel[:2]] == [list(r.series["n"].values) for r in serial]
    assert math.isnan(parallel[1].series["x"].values[1]) and parallel[2].torn_last_line
    bad = write_jsonl(tmp_path / "bad.jsonl", ['{"x": 1}', "nope", '{"x": 2}'])
    with pytest.raises(InputError, match=r"bad\.jsonl:2: invalid JSON"):
        read_metrics_many([a, bad], parallel=True)
