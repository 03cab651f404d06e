"""A JSON object that names a key twice: every JSON reader keeps the last one silently. detaudit
refuses it in standards of every format and in metrics files, naming the file, line and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, write_jsonl
from detaudit.data.metrics import read_metrics
from detaudit.errors import InputError
from detaudit.standards.formats import load_any

STANDARDS = {
    "detaudit": '{\n  "schema": "detaudit/standard/1",\n  "series": {\n    "a": {"step_key": "s", "points": [[1, 0.5]]},\n'
                '    "a": {"step_key": "s", "points": [[1, 0.25]]}\n  }\n}\n',
    "miles": '{\n  "meta": {},\n  "metrics": {\n    "train/loss": [[1.0, 0.5]],\n    "train/loss": [[1.0, 0.25]]\n  }\n}\n',
    "megatron": '{\n    "lm loss": {\n        "start_step": 1,\n        "end_step": 5,\n        "step_interval": 4,\n'
                '        "values": {\n            "1": 10.5,\n            "5": 10.25,\n            "5": 99.0\n'
                '        }\n    }\n}',
    "nemo": '{\n  "train/loss": {\n    "1": 0.5,\n    "2": 0.25\n  },\n  "train/reward": {\n    "1": 0.1,\n'
            '    "1": 0.2\n  }\n}',
}
WHERE = {"detaudit": (5, "a"), "miles": (5, "train/loss"), "megatron": (9, "5"), "nemo": (8, "1")}


@pytest.mark.parametrize("fmt", list(STANDARDS))
def test_a_standard_naming_a_key_twice_is_refused_with_file_line_and_key(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(STANDARDS[fmt])
    line, key = WHERE[fmt]
    with pytest.raises(InputError) as err:
        load_any(path)
    assert str(err.value).startswith(f"{path}:{line}: duplicate key {key!r}")


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(STANDARDS["megatron"])
    result = run_cli("standard", "show", str(path))
    assert result.code == 2 and result.err == f"detaudit: error: {path}:9: duplicate key '5' in one JSON object " \
                                              "(readers keep the last one silently; name each key once)\n"


def test_a_metrics_line_naming_a_key_twice_is_refused(tmp_path: Path) -> None:
    good = json.dumps({"step_key": "s", "s": 1, "loss": 0.5, "note": "a: b", "nested": {"x": 1}})
    cases = {
        '{"step_key": "s", "s": 2, "loss": 0.5, "loss": 0.25}': "loss",
        '{"step_key": "s", "s": 2, "loss": NaN, "loss": 0.25}': "loss",  # the NaN-literal path too
        '{"step_key": "s", "s": 2, "nested": {"x": 1, "x": 2}}': "x",
        '{"step_key": "s", "s": 2, "s": 3, "loss": 0.5}': "s",
    }
    for line, key in cases.items():
        path = write_jsonl(tmp_path / "run.jsonl", [good, line])
        with pytest.raises(InputError) as err:
            read_metrics(path)
        assert str(err.value) == f"{path}:2: duplicate key {key!r} (JSON readers keep the last one silently; name each " \
                                 "key once)"
    ok = read_metrics(write_jsonl(tmp_path / "ok.jsonl", [good, good.replace('"s": 1', '"s": 2')]))
    assert list(ok.series["loss"].values) == [0.5, 0.5]  # colons in strings and nested objects are no duplicates
