"""Standard formats: Megatron-LM golden values, TorchTitan loss files, NeMo-RL metrics JSON.

Samples follow the formats' documented shapes: Megatron-LM's
``tests/functional_tests/test_cases/**/golden_values_*.json`` (``{"lm loss": {"start_step",
"end_step", "step_interval", "values": {"1": ...}}}``, ``"nan"`` for a step not logged),
TorchTitan's ``tests/assets/losses/*.txt`` (``step value`` per line), NeMo-RL's metrics JSON
(``{"train/loss": {"1": ...}}``). Small samples of each shape; the real files are in
``fixtures/goldens`` (``test_goldens.py``, ``test_parity.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from detaudit.data.compare import SeriesData
from detaudit.errors import InputError
from detaudit.standards.check import check_run
from detaudit.standards.formats import FORMAT_NAMES, TABLE, detect_format, drop_nan_series, load_any, render_as
from detaudit.standards.model import Standard

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
    with pytest.raises(InputError, match="inference golden"):
        detect_format(write(tmp_path, "f.json", '{"0": {"generated_tokens": [1, 2], "logprobs": [-0.5]}}'))


def test_megatron_reads_nan_as_not_logged_and_round_trips_byte_exact(tmp_path: Path) -> None:
    std = load_any(write(tmp_path, "golden.json", MEGATRON))
    loss = std.series["lm loss"]
    assert loss.steps == [1, 5, 10, 20] and loss.values == [10.84463, 10.8592, 10.83298, 10.2157]
    assert std.series["num-zeros"].values == [1558, 1683, 1634, 1793]  # ints stay ints
    assert std.native_series("lm loss") == {"start_step": 1, "end_step": 20, "step_interval": 5, "missing": [15]}
    assert std.native_series("iteration-time") == {"start_step": 1, "end_step": 20, "step_interval": 5}
    text = render_as(std, "megatron")
    assert text == MEGATRON  # "nan" cells, headers, key order and layout (indent 4, final newline) written back
    again = load_any(write(tmp_path, "again.json", text))
    same_series(std, again)
    assert render_as(again, "megatron") == text


def test_megatron_refuses_value_precision_and_what_its_checker_refuses(tmp_path: Path) -> None:
    for precision in (-1, 0, 5, 400):
        doc = {"lm loss": {"start_step": 1, "end_step": 1, "step_interval": 1, "value_precision": precision,
                           "values": {"1": 10.5}}}
        with pytest.raises(InputError, match=r"\"value_precision\" is not a Megatron-LM field"):
            load_any(write(tmp_path, "p.json", json.dumps(doc)))
    entry = '"start_step": 1, "end_step": 1, "step_interval": 1'
    with pytest.raises(InputError, match="no 'step_interval'"):
        load_any(write(tmp_path, "h.json", '{"lm loss": {"start_step": 1, "end_step": 1, "values": {"1": 1.5}}}'))
    with pytest.raises(InputError, match="unknown key 'rtol'"):
        load_any(write(tmp_path, "k.json", '{"lm loss": {' + entry + ', "rtol": 0.1, "values": {"1": 1.5}}}'))
    with pytest.raises(InputError, match="'1.0' is not an integer in canonical form"):
        load_any(write(tmp_path, "s.json", '{"lm loss": {' + entry + ', "values": {"1.0": 1.5}}}'))
    with pytest.raises(InputError, match="refuses NaN and infinity"):
        load_any(write(tmp_path, "n.json", '{"lm loss": {' + entry + ', "values": {"1": NaN}}}'))


def test_megatron_list_layout_is_read_and_kept(tmp_path: Path) -> None:
    doc = {"lm loss": {"start_step": 0, "end_step": 10, "step_interval": 5, "values": [10.5, 9.25, "nan"]}}
    std = load_any(write(tmp_path, "old.json", json.dumps(doc)))
    assert std.series["lm loss"].steps == [0, 5]  # positions in the run's logged values, not iterations
    assert std.native_series("lm loss")["list"] is True and std.native_series("lm loss")["missing"] == [10]
    assert render_as(std, "megatron") == json.dumps(doc)


def test_megatron_list_layout_compares_positions_of_the_run(tmp_path: Path) -> None:
    # Megatron's legacy check sliced the run's logged values [start_step:end_step:step_interval].
    golden = write(tmp_path, "old.json", json.dumps(
        {"lm loss": {"start_step": 0, "end_step": 6, "step_interval": 3, "values": [10.5, 9.25]}}))

    def run_of(values: list[float]) -> Path:
        return write_jsonl(tmp_path / "run.jsonl",
                           [json.dumps({"step_key": "it", "it": i + 1, "lm loss": v}) for i, v in enumerate(values)])

    assert check_run(load_any(golden), run_of([10.5, 1.0, 1.0, 9.25, 1.0, 1.0, 7.0])).failures == []
    [(name, divergence)] = check_run(load_any(golden), run_of([10.5, 1.0, 1.0, 9.5, 1.0, 1.0])).failures
    assert name == "lm loss" and divergence.step == 4 and divergence.value_b == 9.5  # the run's 4th iteration


def test_megatron_refuses_what_it_cannot_hold(tmp_path: Path) -> None:
    def std(steps, values):
        return Standard(series={"s": SeriesData("s", "step", steps, values)})

    with pytest.raises(InputError, match=r"NaN value would read back as not logged"):
        render_as(std([1, 2], [0.5, math.nan]), "megatron")
    with pytest.raises(InputError, match="step 1.0 is a float"):
        render_as(std([1.0], [0.5]), "megatron")
    with pytest.raises(InputError, match="no literal for infinity"):
        render_as(std([1], [math.inf]), "megatron")
    with pytest.raises(InputError, match="not a number"):
        render_as(std([1], [True]), "megatron")
    with pytest.raises(InputError, match="steps must increase"):
        render_as(std([2, 1], [0.5, 0.25]), "megatron")


def test_megatron_new_files_are_written_as_megatrons_writer_writes(tmp_path: Path) -> None:
    std = Standard(series={"lm loss": SeriesData("lm loss", "", [1, 5, 10, 15], [10.5, 10.25, 10.0, 9.5]),
                           "num-zeros": SeriesData("num-zeros", "", [1], [2098.0])})
    text = render_as(std, "megatron")
    assert text == json.dumps({"lm loss": {"start_step": 1, "end_step": 15, "step_interval": 5,
                                           "values": {"1": 10.5, "5": 10.25, "10": 10.0, "15": 9.5}},
                               "num-zeros": {"start_step": 1, "end_step": 1, "step_interval": 1,
                                             "values": {"1": 2098.0}}}, indent=4)


def test_torchtitan_reads_as_torchtitan_does(tmp_path: Path) -> None:
    std = load_any(write(tmp_path, "int.txt", "1 8\n2 NaN\n3 7.5"))
    loss = std.series["loss"]
    assert loss.values[0] == 8.0 and type(loss.values[0]) is float and math.isnan(loss.values[1])  # float(), always
    assert render_as(std, "torchtitan") == "1 8\n2 NaN\n3 7.5"  # spelled as the file spells it, no final newline
    with pytest.raises(InputError, match=r":2: blank line"):
        load_any(write(tmp_path, "blank.txt", "1 8.0\n\n2 7.5\n"))
    with pytest.raises(InputError, match=r":3: step 2 appears twice \(lines 2 and 3"):
        load_any(write(tmp_path, "twice.txt", "1 8.0\n2 7.5\n2 7.25\n"))
    with pytest.raises(InputError, match="empty file"):
        load_any(write(tmp_path, "empty.txt", ""))
    with pytest.raises(InputError, match="holds floats only"):
        render_as(Standard(series={"loss": SeriesData("loss", "", [1], [8])}), "torchtitan")


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
    bad = run_cli("standard", "convert", str(src), str(out), "--format", "nemo")
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1, bad.text
    assert "nemo cannot hold start_step/end_step/step_interval of 3 series; \"nan\" cells (2 in 2 series" in bad.err
    assert not out.exists()
    det = tmp_path / "golden.det.json"
    ok = run_cli("standard", "convert", str(src), str(det), "--format", "detaudit")
    assert ok.code == 0 and ok.err == "", ok.text
    assert json.loads(det.read_text())["comparison"] == "megatron"
    again = run_cli("standard", "convert", str(src), str(det), "--format", "detaudit")
    assert again.code == 2 and "exists" in again.err
    miles = write(tmp_path, "m.json", '{"meta": {"commit": "abc", "source": "t"}, "metrics": {"x": [[1, 0.5]]}}')
    lost = run_cli("standard", "convert", str(miles), str(tmp_path / "m.txt"), "--format", "torchtitan")
    assert lost.code == 2 and "torchtitan cannot hold meta (commit, source); nothing written" in lost.err, lost.text


def test_convert_says_which_rule_applies_and_what_stays_behind(tmp_path: Path) -> None:
    std = Standard(series={"loss": SeriesData("loss", "step", [1, 2], [0.5, 0.25])}, name="toy",
                   runner={"class": ["cpu", "x"]}, recorded={"runs": 3})
    src = write(tmp_path, "toy.json", render_as(std, "detaudit"))
    out = tmp_path / "toy.miles.json"
    result = run_cli("standard", "convert", str(src), str(out), "--format", "miles")
    assert result.code == 0, result.text
    assert "note: verified by miles's rule from now on" in result.err and "not detaudit's" in result.err
    assert "not kept (a miles file has no place for them): name, runner, recorded, step keys of 1 series" in result.err
    renamed = write(tmp_path, "renamed.json", render_as(dataclasses.replace(std, rename={"a/loss": "loss"}), "detaudit"))
    refused = run_cli("standard", "convert", str(renamed), str(tmp_path / "r.txt"), "--format", "torchtitan")
    assert refused.code == 2 and "the rename map (1 series)" in refused.err, refused.text
    named = write(tmp_path, "named.json", render_as(dataclasses.replace(std, series={
        "train/loss": SeriesData("train/loss", "step", [1, 2], [0.5, 0.25])}), "detaudit"))
    loss = tmp_path / "loss.txt"
    exported = run_cli("standard", "convert", str(named), str(loss), "--format", "torchtitan")
    assert exported.code == 0 and loss.read_text() == "1 0.5\n2 0.25\n", exported.text
    assert "the series name 'train/loss' (a torchtitan file's one series is 'loss')" in exported.err


@pytest.mark.slow
def test_verify_a_megatron_golden_as_megatron_does(tmp_path: Path) -> None:
    lines = [json.dumps({"step_key": "iteration", "iteration": i, "lm loss": 10.0 - i / 3}) for i in range(1, 11)
             if i != 7]
    run = write_jsonl(tmp_path / "run.jsonl", lines)
    golden = {"lm loss": {"start_step": 1, "end_step": 10, "step_interval": 3,
                          "values": {"1": round(10.0 - 1 / 3, 5), "4": 10.0 - 4 / 3, "7": "nan", "10": 10.0 - 10 / 3}}}
    std = write(tmp_path, "golden_values.json", json.dumps(golden, indent=4))
    # Steps 2, 3, 5, ... are not the golden's: not compared. Step 7 is "nan" and the run has none: a match.
    # Step 1's 5-decimal value matches the run's value rounded to 5 decimals, as Megatron's extractor rounds.
    passed = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert passed.code == 0 and "PASSED: 1 metric series" in passed.out, passed.text
    golden["lm loss"]["values"]["4"] = 10.0 - 4 / 3 + 1e-15  # not a value Megatron writes: exactly or not at all
    std.write_text(json.dumps(golden, indent=4))
    failed = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert failed.code == 1 and "lm loss: step 4" in failed.out
    golden["lm loss"]["values"]["4"] = 10.0 - 4 / 3
    std.write_text(json.dumps(golden, indent=4))
    logged = write_jsonl(tmp_path / "logged.jsonl",
                         lines + [json.dumps({"step_key": "iteration", "iteration": 7, "lm loss": 7.5})])
    [(name, divergence)] = check_run(load_any(std), logged).failures
    assert name == "lm loss" and divergence.step == 7 and divergence.value_a == "nan" and divergence.value_b == 7.5


def test_megatron_rounds_the_run_to_five_decimals_as_its_extractor_does(tmp_path: Path) -> None:
    golden = write(tmp_path, "g.json", json.dumps({"lm loss": {"start_step": 1, "end_step": 3, "step_interval": 1,
                                                               "values": {"1": 0.33333, "2": 0.25, "3": 0.2}}}))
    run = write_jsonl(tmp_path / "run.jsonl",
                      [json.dumps({"step_key": "it", "it": i, "lm loss": 1 / (i + 2)}) for i in range(1, 4)])
    assert check_run(load_any(golden), run).failures == []
    golden.write_text(golden.read_text().replace("0.33333", "0.33334"))
    [(name, divergence)] = check_run(load_any(golden), run).failures
    assert divergence.step == 1 and divergence.value_a == 0.33334


@pytest.mark.slow
def test_record_in_each_format_then_verify_against_it(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    out = tmp_path / "toy.nemo.json"
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--format", "nemo", "--out", str(out))
    # The toy logs float train steps (0.0, 1.0, ...): NeMo-RL's integer step keys cannot hold them.
    assert result.code == 2 and "step 0.0 is a float" in result.err and not out.exists(), result.text
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--format", "nemo", "--out", str(out), "--exclude", "train/*")
    assert result.code == 0, result.text
    assert sorted(json.loads(out.read_text())) == ["rollout/reward/raw_mean", "rollout/reward/raw_num_samples"]
    assert run_cli("verify", str(card), "--standard", str(out)).code == 0
    assert run_cli("verify", str(card), "--standard", str(out), "--", "--unseeded").code == 1
    out = tmp_path / "toy.miles.json"
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--format", "miles", "--drop-nan-series", "--out", str(out))
    assert result.code == 0, result.text
    assert "--drop-nan-series: dropped train/grad_norm (holds NaN)" in result.out
    doc = json.loads(out.read_text())
    assert "train/grad_norm" not in doc["metrics"] and doc["meta"]["dropped_nan_series"] == ["train/grad_norm"]
    assert run_cli("verify", str(card), "--standard", str(out)).code == 0


@pytest.mark.slow
def test_re_record_keeps_the_megatron_files_layout(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    out = tmp_path / "golden_values.json"
    first = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--format", "megatron", "--out", str(out), "--exclude", "train/*")
    assert first.code == 0, first.text
    assert out.read_text().startswith('{\n    "') and not out.read_text().endswith("\n")  # Megatron's writer
    doc = json.loads(out.read_text())
    out.write_text(json.dumps(dict(reversed(list(doc.items())))))  # its own key order, on one line
    before = out.read_text()
    again = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--format", "megatron", "--out", str(out), "--exclude",
                    "train/*", "--update")
    assert again.code == 0, again.text
    assert out.read_text() == before  # the same runs: not one byte changed


def test_the_format_table_gives_the_cli_choices_and_a_new_module_is_a_new_format(tmp_path: Path) -> None:
    assert FORMAT_NAMES == ("detaudit", "miles", "megatron", "torchtitan", "nemo")
    assert [f.name for f in TABLE] == list(FORMAT_NAMES)
    # One new module in formats/ and nothing else: the CLI offers it, detection finds it, convert reads it.
    copy = tmp_path / "pkg"
    shutil.copytree(Path(__file__).resolve().parents[1] / "detaudit", copy / "detaudit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "detaudit" / "standards" / "formats" / "csvloss.py").write_text(CSV_FORMAT)
    env = {**os.environ, "PYTHONPATH": str(copy), "COLUMNS": "200"}
    src = write(tmp_path, "loss.csv", "step,value\n1,0.5\n2,0.25\n")
    out = tmp_path / "o.json"
    proc = subprocess.run([sys.executable, "-m", "detaudit", "standard", "convert", str(src), str(out), "--format",
                           "detaudit"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["comparison"] == "csvloss"
    helptext = subprocess.run([sys.executable, "-m", "detaudit", "standard", "convert", "--help"], capture_output=True,
                              text=True, env=env, cwd=tmp_path).stdout
    assert "nemo|csvloss" in helptext


CSV_FORMAT = '''"""A format of the test: `step,value` lines under a header."""
from detaudit.data.compare import SeriesData, compare_series
from detaudit.standards.formats.common import Format
from detaudit.standards.model import Standard


def load(path, source):
    rows = [line.split(",") for line in source.text.splitlines()[1:]]
    series = SeriesData("loss", "", [int(s) for s, _ in rows], [float(v) for _, v in rows])
    return Standard(series={"loss": series}, format="csvloss", path=path, source_text=source.text)


def render(standard, target):
    data = standard.series["loss"]
    return "step,value\\n" + "".join(f"{s},{v!r}\\n" for s, v in zip(data.steps, data.values))


FORMAT = Format(name="csvloss", title="CSV loss", shape="step,value lines", order=9,
                detect=lambda source: source.text.startswith("step,value"), load=load, render=render,
                compare=lambda expected, native, actual: compare_series(expected, actual, 1, lenient_steps=True),
                rule="exact", holds_step_types=False)
'''


def test_the_spelling_writer_writes_what_json_dumps_writes() -> None:
    from detaudit.standards.formats.common import JsonLayout, dump_json

    doc = {"a": [1, 2.5, -0.0, 1e-05, 1e300, None, True, False, "é\n\"x\"", [], {}, [[1, {"b": []}]]],
           "nan": math.nan, "inf": [math.inf, -math.inf], "nested": {"x": {"y": [0.1, 7]}}, "": 3}
    for indent in (None, 1, 2, 4):
        for separators in ((", ", ": "), (",", ":"), (",", ": ")):
            for ascii_only in (True, False):
                layout = JsonLayout(indent, *separators, final_newline=False, ascii=ascii_only,
                                    spellings={"1e+301": "1E+301"})  # a spelling: the writer of its own, not json's
                assert dump_json(doc, layout, allow_nan=True) == json.dumps(
                    doc, indent=indent, separators=separators, ensure_ascii=ascii_only)
    spelled = JsonLayout(2, ",", ": ", spellings={"4e-05": "0.00004"})
    assert dump_json({"v": [4e-05, 4e-06]}, spelled, allow_nan=False) == '{\n  "v": [\n    0.00004,\n    4e-06\n  ]\n}'
    with pytest.raises(ValueError):
        dump_json({"v": math.nan}, spelled, allow_nan=False)


def test_miles_meta_travels_through_detaudit_whatever_it_holds(tmp_path: Path) -> None:
    from detaudit.standards.formats import convert

    text = json.dumps({"meta": {"commit": "abc", "score": math.nan, "nested": {"a": [1, None]}},
                       "metrics": {"x": [[0, 0.5], [1.0, math.nan]]}}, indent=2, sort_keys=True) + "\n"
    std = load_any(write(tmp_path, "m.json", text))
    det = write(tmp_path, "m.det.json", convert(std, "detaudit", target="m.det.json").text)
    back = load_any(det)
    assert math.isnan(back.meta["score"]) and back.comparison == "miles"
    assert convert(back, "miles", target="back.json").text == text
    reserved = load_any(write(tmp_path, "r.json", '{"meta": {"x": {"float": "NaN"}}, "metrics": {"x": [[0, 0.5]]}}'))
    with pytest.raises(InputError, match=r'detaudit cannot hold this meta: it uses the \{"float": ...\} shape'):
        convert(reserved, "detaudit", target="r.det.json")
