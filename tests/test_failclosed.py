"""Fail closed on bad input: one-line errors (exit 2), exact arrays, bounded reads, honest files.

These run the CLI on files only (no recipe runs); test_failclosed_runs.py covers record/verify.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, strict_json, write_card, write_jsonl

from detaudit.data.card import load_card
from detaudit.data.compare import SeriesData, diff_runs
from detaudit.errors import InputError, UsageError
from detaudit.data.values import same_value
from detaudit.data.metrics import read_metrics
from detaudit.render.diff import diff_json
from detaudit.fileio import write_atomic
from detaudit.standards.standard import Standard, load_standard, render_standard, standard_lock
from detaudit.flows.verify import verify


def one_line_error(result, code: int = 2) -> str:
    assert result.code == code, result.text
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaudit: error: "), result.err
    assert "Traceback" not in result.text
    return lines[0]


# --- arrays are compared exactly ---------------------------------------------------------------


def test_arrays_compare_type_and_signed_zero_inside(tmp_path: Path) -> None:
    assert not same_value([1, 0.0], [1.0, -0.0]) and not same_value([0.0], [-0.0])
    assert not same_value({"a": [1]}, {"a": [1.0]}) and same_value([math.nan, {"b": 1}], [math.nan, {"b": 1}])
    a = write_jsonl(tmp_path / "a.jsonl", ['{"a": [1, 0.0], "b": [0.0]}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"a": [1.0, -0.0], "b": [-0.0]}'])
    report = diff_runs([read_metrics(a), read_metrics(b)])
    assert {m.series: m.kind for m in report.mismatched} == {"a": "type", "b": "signed-zero"}
    result = run_cli("diff", str(a), str(b))
    assert result.code == 1 and "0 / 2 identical, 2 mismatched" in result.out


def test_nan_inside_arrays_renders_and_round_trips(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"a": [NaN, 1.0], "n": 1}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"a": [NaN, 2.0], "n": 1}'])
    result = run_cli("diff", "--json", str(a), str(b))
    assert result.code == 1, result.text
    doc = strict_json(result.out)
    assert doc["mismatched"][0]["values"] == [[{"float": "NaN"}, 1.0], [{"float": "NaN"}, 2.0]]
    assert "[NaN, 1.0]" in run_cli("diff", str(a), str(b)).out
    run = read_metrics(a)
    std = Standard(series={"a": SeriesData.from_run(run, run.series["a"])}, name="t")
    path = tmp_path / "s.json"
    path.write_text(render_standard(std))
    strict_json(path.read_text())
    loaded = load_standard(path)
    assert same_value(loaded.series["a"].values[0], [math.nan, 1.0])


def test_reserved_float_object_in_metrics_is_an_input_error(tmp_path: Path) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", ['{"x": 1.0}', '{"x": {"float": "NaN"}}'])
    error = one_line_error(run_cli("diff", str(bad), str(bad)))
    assert f"{bad}:2: 'x': holds {{\"float\": ...}}" in error
    nested = write_jsonl(tmp_path / "nested.jsonl", ['{"x": [1, {"float": "Infinity"}]}'])
    assert "holds" in one_line_error(run_cli("diff", str(nested), str(nested)))


# --- numbers and nesting: one-line errors, never a traceback --------------------------------------


def test_deep_nesting_is_a_one_line_error(tmp_path: Path) -> None:
    for levels in (100, 1000, 5000):
        deep = write_jsonl(tmp_path / f"deep{levels}.jsonl", ['{"x": ' + "[" * levels + "]" * levels + "}"])
        error = one_line_error(run_cli("diff", str(deep), str(deep)))
        assert f"{deep}:1:" in error and "nested deeper than 64 levels" in error
        std = tmp_path / f"deep{levels}.json"
        std.write_text('{"schema": "detaudit/standard/1", "series": {"x": {"points": [[0, '
                       + "[" * levels + "]" * levels + "]]}}}")
        with pytest.raises(InputError, match="nested deeper than 64 levels"):
            load_standard(std)
    step = write_jsonl(tmp_path / "step.jsonl", ['{"step_key": "s", "s": [1], "x": 1}'])
    assert "step 's' must be an integer, got an array" in one_line_error(run_cli("diff", str(step), str(step)))


def test_huge_integers(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [json.dumps({"x": 10**400, "y": 1.0})])
    b = write_jsonl(tmp_path / "b.jsonl", [json.dumps({"x": 10**400 + 1, "y": 1.0})])
    table = run_cli("diff", str(a), str(b))
    assert table.code == 1 and "Traceback" not in table.text and "1 / 2 identical" in table.out
    doc = strict_json(run_cli("diff", "--json", str(a), str(b)).out)
    assert doc["mismatched"][0]["abs_diff"] == 1.0 and doc["mismatched"][0]["rel_diff"] is None
    h = write_jsonl(tmp_path / "h.jsonl", [json.dumps({"x": v}) for v in (10**400, 1, 2, 3)])
    health = run_cli("health", str(h), "--metric", "x", "--no-png", "--json")
    assert health.code == 0 and strict_json(health.out)["skipped"] == 1
    digits = write_jsonl(tmp_path / "d.jsonl", ['{"x": ' + "7" * 5000 + "}"])
    assert one_line_error(run_cli("diff", str(digits), str(digits))).endswith(
        "d.jsonl:1: invalid JSON: an integer of 5000 digits: detaudit reads integers of up to 4300 digits (Python's "
        "limit on converting them safely)")
    std = tmp_path / "d.json"
    std.write_text('{"schema": "detaudit/standard/1", "series": {"x": {"points": [[0, ' + "7" * 5000 + "]]}}}")
    assert "invalid JSON" in one_line_error(run_cli("verify", "--metrics", str(a), "--standard", str(std)))


def test_health_overflowing_sums_and_strict_json(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [json.dumps({"x": v}) for v in (-1e308, -1e308, 1e308, 1e308)])
    result = run_cli("health", str(path), "--metric", "x", "--window", "2", "--no-png", "--json")
    assert result.code == 0, result.text
    doc = strict_json(result.out)
    assert doc["first_mean"] == -1e308 and doc["last_mean"] == 1e308 and doc["delta"] == {"float": "Infinity"}
    assert run_cli("health", str(path), "--metric", "x", "--no-png").code == 0


# --- bounded reads --------------------------------------------------------------------------------


def test_dev_zero_and_huge_lines_are_refused(tmp_path: Path) -> None:
    ok = write_jsonl(tmp_path / "ok.jsonl", ['{"x": 1}'])
    error = one_line_error(run_cli("diff", "/dev/zero", str(ok)))
    assert error.startswith("detaudit: error: /dev/zero:1: line is longer than 64 MiB")
    error = one_line_error(run_cli("verify", "--metrics", str(ok), "--standard", "/dev/zero"))
    assert "/dev/zero: standard is larger than 256 MiB" in error
    card = tmp_path / "zero.toml"
    card.symlink_to("/dev/zero")
    assert "recipe card is larger than" in one_line_error(run_cli("verify", str(card)))


# --- card fields ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('metrics_env = "A=B"', "metrics_env: must be an environment variable name"),
        ('env = {"A=B" = "1"}', "is not a valid environment variable"),
        ("timeout_s = nan", "timeout_s: must be a positive, finite number"),
        ("timeout_s = inf", "timeout_s: must be a positive, finite number"),
        ("timeout_s = -inf", "timeout_s: must be a positive, finite number"),
        ("est_time = nan", "est_time: must be a finite number"),
    ],
)
def test_bad_card_fields(tmp_path: Path, line: str, message: str) -> None:
    card = write_card(tmp_path / "c.toml", extra=line + "\n")
    card.write_text(card.read_text().replace("timeout_s = 60\n", "") if line.startswith("timeout_s") else card.read_text())
    with pytest.raises(InputError, match=message):
        load_card(card)
    error = one_line_error(run_cli("verify", str(card)))
    assert error.startswith(f"detaudit: error: {card}:") and message.split(":")[0] in error


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "", "a/b", ".hidden", "..", "a\\\\b"])
def test_card_name_must_be_a_plain_file_name(tmp_path: Path, name: str) -> None:
    card = write_card(tmp_path / "c.toml", name=name)
    error = one_line_error(run_cli("record", str(card), "--runs", "2"))
    assert "name: must be a plain file name" in error
    assert not (tmp_path / "standards").exists() and not (tmp_path.parent / "x.cpu-test.json").exists()


def test_nul_in_command_is_an_input_error(tmp_path: Path) -> None:
    card = write_card(tmp_path / "c.toml", args=["--steps\u00002"])
    assert "command: must not contain a NUL byte" in one_line_error(run_cli("verify", str(card)))


# --- writing standards ----------------------------------------------------------------------------


def test_write_errors_are_input_errors_and_keep_the_old_file(tmp_path: Path) -> None:
    folder = tmp_path / "std"
    path = folder / "s.json"
    write_atomic(path, "old\n", overwrite=False)
    folder.chmod(0o555)
    try:
        if not os.access(folder, os.W_OK):  # root writes read-only dirs; the cases below still run
            with pytest.raises(InputError, match="cannot write the file: Permission denied"):
                write_atomic(path, "new\n", overwrite=True)
            with pytest.raises(InputError, match="cannot create the lock: Permission denied"):
                with standard_lock(path):
                    pass
    finally:
        folder.chmod(0o755)
    assert path.read_text() == "old\n"
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot create the lock: Not a directory"):
        with standard_lock(blocker / "std.json"):
            pass
    with pytest.raises(InputError, match="Not a directory"):
        write_atomic(blocker / "std.json", "new\n", overwrite=False)
    with pytest.raises(InputError, match="cannot create .*file.txt/sub: Not a directory"):
        write_atomic(blocker / "sub" / "std.json", "new\n", overwrite=False)
    assert blocker.read_text() == "x"


FULL_DISK = """
import resource, signal, sys
from detaudit.errors import InputError
from detaudit.fileio import write_atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # writes past 1000 bytes fail (EFBIG), as on a full disk
try:
    write_atomic(sys.argv[1], "y" * 5000, overwrite=True)
except InputError as exc:
    print(exc)
"""


def test_a_full_disk_is_an_input_error_and_keeps_the_old_standard(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("old\n")
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.startswith(f"{path}: cannot write the file: File too large")
    assert path.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["s.json"]


def test_modes_follow_the_umask_and_are_kept_on_update(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "s.json"
        write_atomic(path, "one\n", overwrite=False)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o664)
        write_atomic(path, "two\n", overwrite=True)
        assert stat.S_IMODE(path.stat().st_mode) == 0o664
        os.umask(0o077)
        write_atomic(tmp_path / "private.json", "x\n", overwrite=False)
        assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_update_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("one\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "two\n", overwrite=True)
    assert link.is_symlink() and target.read_text() == "two\n"


def test_a_lock_that_wrote_nothing_leaves_no_new_dirs(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "s.json"
    with standard_lock(path):
        assert path.parent.is_dir()
    assert not (tmp_path / "a").exists()
    with standard_lock(path):
        write_atomic(path, "x\n", overwrite=False)
    assert path.read_text() == "x\n" and not Path(str(path) + ".lock").exists()


def test_health_png_into_a_missing_dir_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [json.dumps({"x": float(i)}) for i in range(5)])
    target = tmp_path / "missing" / "dir" / "x.png"
    error = one_line_error(run_cli("health", str(path), "--metric", "x", "--png", str(target)))
    assert "no such directory" in error and not (tmp_path / "missing").exists()


# --- the command line -----------------------------------------------------------------------------


@pytest.mark.slow
def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    for args in (("diff",), ("record", "--runs", "1"), ("verify", "--bogus"), ("nope",), ("health", "x.jsonl")):
        error = one_line_error(run_cli(*args))
        assert "Usage:" not in error


def test_torn_line_warning_is_printed_once(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"x": 1}', '{"x": 2}'])
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"x": 1}\n{"x": 2}\n{"x": 3')
    result = run_cli("diff", str(a), str(torn))
    assert result.code == 0 and result.text.count("incomplete") == 1, result.text
    assert "torn last line" not in result.out


def test_piped_output_is_not_hard_wrapped(tmp_path: Path) -> None:
    names = [f"series/{'n' * 60}/{i}" for i in range(8)]
    a = write_jsonl(tmp_path / "a.jsonl", [json.dumps({n: 1.0 for n in names})])
    b = write_jsonl(tmp_path / "b.jsonl", [json.dumps({**{n: 1.0 for n in names}, names[-1]: 2.0})])
    result = run_cli("diff", str(a), str(b), env={"COLUMNS": "80"})
    identical = next(line for line in result.out.splitlines() if line.startswith("identical:"))
    assert all(n in identical for n in names[:-1])
    assert any(names[-1] in line and "value" in line for line in result.out.splitlines())


def test_close_kind_wording(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"x": 1.0, "y": 1.0}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"x": 1.0000000000000002, "y": 1.5}'])
    out = run_cli("diff", str(a), str(b)).out
    close_row = next(line for line in out.splitlines() if "│ x " in line or line.startswith("│ x"))
    value_row = next(line for line in out.splitlines() if line.startswith("│ y"))
    assert "close (rel <= 1e-06)" in close_row and close_row.rstrip("│ ").endswith("1")  # 1 ULP shown
    assert "ulp" not in out.replace("ULPs", "")
    assert value_row.split("│")[-2].strip() == ""  # no ULP count for different data


# --- behaviours that must each have a test that bites ---------------------------------------------


def test_diff_include_takes_back_real_perf_series(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"x": 1.0, "perf/step_time": 1.5}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"x": 1.0, "perf/step_time": 2.5}'])
    assert run_cli("diff", str(a), str(b)).code == 0
    included = run_cli("diff", "--include", "perf/*", str(a), str(b))
    assert included.code == 1 and "mismatched: perf/step_time" in included.out
    excluded = run_cli("diff", "--exclude", "x", str(a), str(b), "--json", "--include", "perf/*")
    assert strict_json(excluded.out)["excluded"] == {"x": "--exclude 'x'"}
    # leaving out both series leaves nothing to compare: an error naming what left each out
    nothing = one_line_error(run_cli("diff", "--exclude", "x", str(a), str(b), "--json"))
    assert "1 by --exclude 'x'" in nothing and "1 by default wall-clock pattern 'perf/*'" in nothing


STANDARD_LINES = [
    '{"step_key": "s", "s": 0, "a": 0.5, "b": 1, "c": [1.0, 2.0], "d": "x"}',
    '{"step_key": "s", "s": 1, "a": 0.25, "b": 2, "c": [1.0, 3.0], "d": "y"}',
]


def _standard_from(tmp_path: Path, fmt: str = "detaudit", dropped: dict | None = None) -> Path:
    run = read_metrics(write_jsonl(tmp_path / "rec.jsonl", STANDARD_LINES))
    series = {n: SeriesData.from_run(run, s) for n, s in run.series.items()}
    path = tmp_path / f"std.{fmt}.json"
    path.write_text(render_standard(Standard(series=series, format=fmt, name="t", dropped=dropped or {})))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("series", "old", "new"), [("a", '"a": 0.25', '"a": 0.5'), ("b", '"b": 2', '"b": 3'),
                                                     ("c", "[1.0, 3.0]", "[1.0, 3]"), ("d", '"d": "y"', '"d": "z"')])
def test_verify_compares_every_series_of_the_standard(tmp_path: Path, series: str, old: str, new: str) -> None:
    std = _standard_from(tmp_path)
    same = write_jsonl(tmp_path / "same.jsonl", STANDARD_LINES)
    assert verify(metrics=same, standard=std).status == "passed"
    changed = write_jsonl(tmp_path / "changed.jsonl", [STANDARD_LINES[0], STANDARD_LINES[1].replace(old, new)])
    result = verify(metrics=changed, standard=std)
    assert result.status == "failed" and [name for name, _ in result.failures] == [series]
    assert result.compared == 4


@pytest.mark.slow
def test_miles_standards_match_integer_steps_leniently(tmp_path: Path) -> None:
    path = tmp_path / "miles.json"
    path.write_text('{"meta": {}, "metrics": {"a": [[0.0, 0.5], [1.0, 0.25]]}}')
    run = write_jsonl(tmp_path / "run.jsonl", ['{"step_key": "s", "s": 0, "a": 0.5}', '{"step_key": "s", "s": 1, "a": 0.25}'])
    assert verify(metrics=run, standard=path).status == "passed"
    ours = tmp_path / "ours.json"
    ours.write_text('{"schema": "detaudit/standard/1", "series": {"a": {"step_key": "s", "points": [[0.0, 0.5], [1.0, 0.25]]}}}')
    result = verify(metrics=run, standard=ours)
    assert result.status == "failed" and result.failures[0][1].kind == "steps"


def test_dropped_series_are_not_reported_as_extra(tmp_path: Path) -> None:
    std = _standard_from(tmp_path, dropped={"e": {"kind": "value", "step": 0, "disagreeing_runs": [2]}})
    run = write_jsonl(tmp_path / "run.jsonl", [line.replace("}", ', "e": 1.0, "f": 2.0}') for line in STANDARD_LINES])
    result = verify(metrics=run, standard=std)
    assert result.status == "passed" and result.extra_series == ["f"]


def test_an_empty_standard_never_passes(tmp_path: Path) -> None:
    std = tmp_path / "empty.json"
    std.write_text('{"schema": "detaudit/standard/1", "name": "t", "series": {}}')
    run = write_jsonl(tmp_path / "run.jsonl", ['{"x": 1.0}'])
    assert verify(metrics=run, standard=std).status == "empty-standard"
    result = run_cli("verify", "--metrics", str(run), "--standard", str(std))
    assert result.code == 1 and "NOT VERIFIED: the standard" in result.out and "has no metric series" in result.out


def test_strict_runner_and_allow_other_runner_contradict() -> None:
    with pytest.raises(UsageError, match="contradict"):
        verify(metrics="m.jsonl", standard="s.json", strict_runner=True, allow_other_runner=True)


def test_diff_json_is_stable_and_strict(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", ['{"x": Infinity}'])
    b = write_jsonl(tmp_path / "b.jsonl", ['{"x": -Infinity}'])
    report = diff_runs([read_metrics(a), read_metrics(b)])
    text = diff_json(report)
    assert text == diff_json(report) and strict_json(text)["mismatched"][0]["values"] == [
        {"float": "Infinity"}, {"float": "-Infinity"}]
