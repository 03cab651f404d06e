"""Standard formats: Megatron-LM golden values, TorchTitan loss files, NeMo-RL metrics JSON.

Samples follow the formats' documented shapes: Megatron-LM's
``tests/functional_tests/test_cases/**/golden_values_*.json`` (``{"lm loss": {"start_step",
"end_step", "step_interval", "values": {"1": ...}}}``, ``"nan"`` for a step not logged),
TorchTitan's ``tests/assets/losses/*.txt`` (``step value`` per line), NeMo-RL's metrics JSON
(``{"train/loss": {"1": ...}}``).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from detaudit.data.compare import SeriesData
from detaudit.errors import InputError
from detaudit.standards.formats import detect_format, drop_nan_series, load_any, render_as
from detaudit.standards.standard import Standard

from conftest import run_cli, write_card, write_jsonl

MEGATRON = """{
    "lm loss": {
        "start_step": 1,
        "end_step": 20,
        "step_interval": 5,
        "values": {
            "1": 10.84463,
            "5": 10.8592,
            "10": 10.83298,
            "15": "nan",
            "20": 10.2157
        }
    },
    "num-zeros": {
        "start_step": 1,
        "end_step": 20,
        "step_interval": 5,
        "values": {
            "1": 1558,
            "5": 1683,
            "10": 1634,
            "15": "nan",
            "20": 1793
        }
    },
    "iteration-time": {
        "start_step": 1,
        "end_step": 20,
        "step_interval": 5,
        "value_precision": 2,
        "values": {
            "1": 12.35,
            "5": 0.41,
            "10": 0.4,
            "15": 0.4,
            "20": 0.41
        }
    }
}
"""

TORCHTITAN = "1 8.048324584960938\n2 7.751155376434326\n3 7.032480716705322\n4 6.154099464416504\n5 nan\n"

NEMO = json.dumps({
    "train/loss": {"1": 0.5901, "2": 0.57, "3": -0.0},
    "train/reward": {"1": 0.1, "2": 0.30000000000000004, "3": float("nan")},
    "train/num_valid_samples": {"1": 64, "2": 64, "3": 63},
}, indent=4)


def bits(values):
    return [struct.pack("<d", v) if type(v) is float else (type(v), v) for v in values]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def same_series(a: Standard, b: Standard) -> None:
    assert sorted(a.series) == sorted(b.series)
    for name in a.series:
        assert list(map(type, a.series[name].steps)) == list(map(type, b.series[name].steps)), name
        assert a.series[name].steps == b.series[name].steps, name
        assert bits(a.series[name].values) == bits(b.series[name].values), name


def test_detects_each_format_from_content(tmp_path: Path) -> None:
    assert detect_format(write(tmp_path, "a.json", MEGATRON)) == "megatron"
    assert detect_format(write(tmp_path, "b.txt", TORCHTITAN)) == "torchtitan"
    assert detect_format(write(tmp_path, "c.json", NEMO)) == "nemo"
    assert detect_format(write(tmp_path, "d.json", '{"meta": {}, "metrics": {"x": [[1, 0.5]]}}')) == "miles"
    with pytest.raises(InputError, match="not a standard"):
        detect_format(write(tmp_path, "e.json", '{"x": [1, 2]}'))


def test_megatron_reads_nan_as_missing_and_round_trips_byte_exact(tmp_path: Path) -> None:
    std = load_any(write(tmp_path, "golden.json", MEGATRON))
    loss = std.series["lm loss"]
    assert loss.steps == [1, 5, 10, 20] and loss.values == [10.84463, 10.8592, 10.83298, 10.2157]
    assert std.series["num-zeros"].values == [1558, 1683, 1634, 1793]  # ints stay ints
    assert std.meta["megatron"]["lm loss"]["missing"] == [15]
    text = render_as(std, "megatron")
    assert json.loads(text) == json.loads(MEGATRON)  # "nan" points and value_precision written back
    again = load_any(write(tmp_path, "again.json", text))
    same_series(std, again)
    assert render_as(again, "megatron") == text


def test_megatron_list_layout_is_read_and_kept(tmp_path: Path) -> None:
    doc = {"lm loss": {"start_step": 0, "end_step": 10, "step_interval": 5, "values": [10.5, 9.25, "nan"]}}
    std = load_any(write(tmp_path, "old.json", json.dumps(doc)))
    assert std.series["lm loss"].steps == [0, 5]
    assert json.loads(render_as(std, "megatron")) == doc


def test_megatron_refuses_what_it_cannot_hold(tmp_path: Path) -> None:
    def std(steps, values):
        return Standard(series={"s": SeriesData("s", "step", steps, values)})

    with pytest.raises(InputError, match=r"NaN value would read back as missing"):
        render_as(std([1, 2], [0.5, math.nan]), "megatron")
    with pytest.raises(InputError, match="step 1.0 is a float"):
        render_as(std([1.0], [0.5]), "megatron")
    with pytest.raises(InputError, match="no literal for infinity"):
        render_as(std([1], [math.inf]), "megatron")
    with pytest.raises(InputError, match="not a number"):
        render_as(std([1], [True]), "megatron")
    with pytest.raises(InputError, match="steps must increase"):
        render_as(std([2, 1], [0.5, 0.25]), "megatron")
    rounded = load_any(write(tmp_path, "g.json", MEGATRON))
    with pytest.raises(InputError, match="value_precision"):
        render_as(rounded, "detaudit")


def test_torchtitan_round_trip_and_one_series(tmp_path: Path) -> None:
    std = load_any(write(tmp_path, "llama3.txt", TORCHTITAN))
    loss = std.series["loss"]
    assert loss.steps == [1, 2, 3, 4, 5] and loss.values[0] == 8.048324584960938 and math.isnan(loss.values[4])
    assert render_as(std, "torchtitan") == TORCHTITAN
    two = load_any(write(tmp_path, "n.json", NEMO))
    with pytest.raises(InputError, match="holds one series and this standard has 3"):
        render_as(two, "torchtitan")
    text = render_as(two, "torchtitan", series="train/loss")
    assert text == "1 0.5901\n2 0.57\n3 -0.0\n"  # signed zero kept
    with pytest.raises(InputError, match=":2: expected `STEP VALUE`"):
        load_any(write(tmp_path, "bad.txt", "1 0.5\n2.5 0.25\n"))


def test_nemo_round_trip_exact_including_nan_and_signed_zero(tmp_path: Path) -> None:
    std = load_any(write(tmp_path, "metrics.json", NEMO))
    assert std.series["train/loss"].values[2] == 0.0 and math.copysign(1, std.series["train/loss"].values[2]) < 0
    text = render_as(std, "nemo")
    same_series(std, load_any(write(tmp_path, "again.json", text)))
    with pytest.raises(InputError, match="step 0.5 is a float"):
        render_as(Standard(series={"x": SeriesData("x", "", [0.5], [1.0])}), "nemo")


@pytest.mark.parametrize("via", ["detaudit", "miles", "nemo", "megatron"])
def test_conversions_between_formats_are_exact(tmp_path: Path, via: str) -> None:
    source = Standard(series={
        "train/loss": SeriesData("train/loss", "train/step", [1, 2, 3], [0.1, 1 / 3, -0.0]),
        "rollout/n": SeriesData("rollout/n", "rollout/step", [0, 1], [8, 8]),
    })
    text = render_as(source, via)
    back = load_any(write(tmp_path, f"s.{via}", text))
    same_series(source, back)
    assert render_as(back, via) == text


def test_drop_nan_series_names_and_records_them() -> None:
    std = Standard(series={
        "train/grad_norm": SeriesData("train/grad_norm", "s", [1, 2], [math.nan, 0.5]),
        "train/loss": SeriesData("train/loss", "s", [1, 2], [0.25, 0.5]),
    }, format="miles", meta={"commit": "abc"})
    assert drop_nan_series(std) == ["train/grad_norm"]
    assert list(std.series) == ["train/loss"] and std.meta["dropped_nan_series"] == ["train/grad_norm"]
    assert json.loads(render_as(std, "miles"))["meta"]["dropped_nan_series"] == ["train/grad_norm"]


# --- through the CLI ----------------------------------------------------------------------


def test_cli_convert_writes_exact_and_refuses_lossy(tmp_path: Path) -> None:
    src = write(tmp_path, "golden.json", MEGATRON)
    out = tmp_path / "golden.nemo.json"
    bad = run_cli("standard", "convert", str(src), str(tmp_path / "x.json"), "--format", "detaudit")
    assert bad.code == 2 and "value_precision" in bad.err and len(bad.err.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
    ok = run_cli("standard", "convert", str(src), str(out), "--format", "nemo")
    assert ok.code == 0, ok.text
    assert json.loads(out.read_text())["lm loss"] == {"1": 10.84463, "5": 10.8592, "10": 10.83298, "20": 10.2157}
    again = run_cli("standard", "convert", str(src), str(out), "--format", "nemo")
    assert again.code == 2 and "exists" in again.err


def test_verify_autodetects_a_megatron_standard_sampled_every_nth_step(tmp_path: Path) -> None:
    lines = [json.dumps({"step_key": "iteration", "iteration": i, "lm loss": 10.0 - i / 3}) for i in range(1, 11)]
    run = write_jsonl(tmp_path / "run.jsonl", lines)
    golden = {"lm loss": {"start_step": 1, "end_step": 10, "step_interval": 3,
                          "values": {"1": 10.0 - 1 / 3, "4": 10.0 - 4 / 3, "7": "nan", "10": 10.0 - 10 / 3}}}
    std = write(tmp_path, "golden_values.json", json.dumps(golden, indent=4))
    passed = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert passed.code == 0 and "PASSED: 1 metric series" in passed.out, passed.text
    golden["lm loss"]["values"]["4"] = 10.0 - 4 / 3 + 1e-15
    std.write_text(json.dumps(golden, indent=4))
    failed = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert failed.code == 1 and "lm loss: step 4" in failed.out


def test_verify_honours_megatron_value_precision(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps({"step_key": "it", "it": i, "lm loss": 1 / (i + 2)}) for i in range(1, 4)])
    golden = {"lm loss": {"start_step": 1, "end_step": 3, "step_interval": 1, "value_precision": 5,
                          "values": {"1": 0.33333, "2": 0.25, "3": 0.2}}}
    std = write(tmp_path, "g.json", json.dumps(golden))
    assert run_cli("verify", "--metrics", str(run), "--standard", str(std)).code == 0
    golden["lm loss"]["values"]["1"] = 0.33334
    std.write_text(json.dumps(golden))
    assert run_cli("verify", "--metrics", str(run), "--standard", str(std)).code == 1


def test_record_in_each_format_then_verify_against_it(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    out = tmp_path / "toy.nemo.json"
    result = run_cli("record", str(card), "--runs", "2", "--format", "nemo", "--out", str(out))
    # The toy logs float train steps (0.0, 1.0, ...): NeMo-RL's integer step keys cannot hold them.
    assert result.code == 2 and "step 0.0 is a float" in result.err and not out.exists(), result.text
    result = run_cli("record", str(card), "--runs", "2", "--format", "nemo", "--out", str(out), "--exclude", "train/*")
    assert result.code == 0, result.text
    assert sorted(json.loads(out.read_text())) == ["rollout/reward/raw_mean", "rollout/reward/raw_num_samples"]
    assert run_cli("verify", str(card), "--standard", str(out)).code == 0
    assert run_cli("verify", str(card), "--standard", str(out), "--", "--unseeded").code == 1
    out = tmp_path / "toy.miles.json"
    result = run_cli("record", str(card), "--runs", "2", "--format", "miles", "--drop-nan-series", "--out", str(out))
    assert result.code == 0, result.text
    assert "--drop-nan-series: dropped train/grad_norm (holds NaN)" in result.out
    doc = json.loads(out.read_text())
    assert "train/grad_norm" not in doc["metrics"] and doc["meta"]["dropped_nan_series"] == ["train/grad_norm"]
    assert run_cli("verify", str(card), "--standard", str(out)).code == 0
