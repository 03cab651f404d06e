"""Standard files: bit-exact round trips, stable bytes, atomic no-clobber writes, locks, miles."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from detaudit.data.compare import SeriesData
from detaudit.fileio import write_atomic
from detaudit.errors import InputError, UsageError
from detaudit.standards.standard import (
    Standard,
    load_standard,
    render_standard,
    standard_lock,
)

VALUES = [0.1, -0.0, 0.0, 5e-324, 1.7976931348623157e308, math.nan, math.inf, -math.inf, 3, True, None, "NaN",
          0.74586021900177, 1 / 3]


def bits(v):
    return struct.pack("<d", v) if type(v) is float else v


def make(fmt: str = "detaudit") -> Standard:
    series = {
        "b/vals": SeriesData("b/vals", "train/step", [float(i) for i in range(len(VALUES))], list(VALUES)),
        "a/loss": SeriesData("a/loss", "rollout/step", [0, 1], [0.5, math.nan]),
    }
    return Standard(series=series, format=fmt, name="t", runner={"class": ["cpu", "x"]}, meta={"commit": "abc"})


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    text = render_standard(make())
    json.loads(text)  # strict JSON, no NaN literals:
    assert "NaN," not in text and "Infinity" not in text.replace('"Infinity"', "").replace('"-Infinity"', "")
    path = tmp_path / "s.json"
    path.write_text(text)
    loaded = load_standard(path)
    got = loaded.series["b/vals"].values
    assert [type(v) for v in got] == [type(v) for v in VALUES]
    for a, b in zip(got, VALUES):
        assert (math.isnan(a) and math.isnan(b)) if type(a) is float and a != a else bits(a) == bits(b)
    assert loaded.series["a/loss"].step_key == "rollout/step"
    assert render_standard(loaded) == render_standard(make())  # the same bytes after a round trip


def test_same_input_same_bytes_and_readable_layout() -> None:
    a, b = render_standard(make()), render_standard(make())
    assert a == b
    assert '\n        [0, 0.5],\n' in a  # one point per line
    keys = [line.strip().split('"')[1] for line in a.splitlines() if line.startswith('  "')]
    assert keys == sorted(keys)


def test_miles_format_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(render_standard(make("miles")))
    doc = json.loads(path.read_text())  # Python's json reads NaN literals, as miles does
    assert set(doc) == {"meta", "metrics"} and doc["metrics"]["a/loss"][0] == [0, 0.5]
    loaded = load_standard(path)
    assert loaded.format == "miles" and math.isnan(loaded.series["a/loss"].values[1])


def test_reads_an_existing_miles_standard(tmp_path: Path) -> None:
    path = tmp_path / "miles.json"
    path.write_text('{"meta": {"commit": "deadbeef", "source": "run"}, "metrics": '
                    '{"train/grad_norm": [[1.0, NaN], [2.0, 0.25]], "rollout/raw": [[1, 0.5]]}}')
    std = load_standard(path)
    assert std.format == "miles" and std.meta["commit"] == "deadbeef"
    assert std.series["train/grad_norm"].steps == [1.0, 2.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", r"s\.json:1: invalid JSON"),
        ("[]", r"s\.json: a standard must be a JSON object"),
        ('{"schema": "detaudit/standard/9", "series": {}}', "unsupported standard schema"),
        ('{"foo": 1}', "not a standard"),
        ('{"metrics": {"a": [[1]]}}', r"series 'a': point 0 must be \[step, value\]"),
        ('{"schema": "detaudit/standard/1", "series": {"a": {"points": [[1, {"float": "Nope"}]]}}}', "unknown non-finite float"),
    ],
)
def test_bad_standards(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(InputError, match=expected):
        load_standard(path)


def test_write_atomic_never_clobbers_without_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "std" / "s.json"
    write_atomic(path, "one\n", overwrite=False)
    with pytest.raises(UsageError, match="exists; pass --update"):
        write_atomic(path, "two\n", overwrite=False)
    assert path.read_text() == "one\n"
    write_atomic(path, "three\n", overwrite=True)
    assert path.read_text() == "three\n"
    assert sorted(os.listdir(path.parent)) == ["s.json"]  # no temporary files left


def test_lock_refuses_a_second_holder_and_takes_over_stale(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with standard_lock(path):
        with pytest.raises(UsageError, match="another 'detaudit record' of this standard is running"):
            with standard_lock(path):
                pass
    assert not Path(str(path) + ".lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    Path(str(path) + ".lock").write_text(dead.stdout)
    with standard_lock(path):  # the pid is gone: a stale lock is taken over
        pass
