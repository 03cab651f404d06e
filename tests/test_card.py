"""Recipe cards: the schema, placeholders, and errors naming the file, line and key."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from detaudit.data.card import command_python, load_card, run_argv, run_env
from detaudit.standards.store import standard_path
from detaudit.errors import InputError
from detaudit.runner_class import RunnerClass


def card(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_full_card(tmp_path: Path) -> None:
    path = card(tmp_path, """
name = "x"
command = ["{python}", "-m", "pkg", "--out", "{metrics}"]
env = {A = "1", W = "{workdir}"}
metrics_env = "MILES_METRICS_JSONL"
timeout_s = 12.5
exclude = ["debug/*"]
include = ["perf/keep"]
step_key = "it"
runner = ["h200", "1gpu"]
gpus_per_run = 1
est_time = 30
suite = "gpu"
pythonpath = [".."]
""")
    c = load_card(path)
    assert (c.name, c.timeout_s, c.runner, c.gpus_per_run, c.step_key) == ("x", 12.5, RunnerClass(("h200", "1gpu")), 1, "it")
    # No pyproject.toml or .git above a tmp dir: a relative standards_dir is under the card's folder.
    assert standard_path(c, c.runner) == tmp_path / "standards" / "x.h200-1gpu.json"
    wd, metrics = tmp_path / "w", tmp_path / "w" / "m.jsonl"
    argv = run_argv(c, wd, metrics, ("--extra",), python="/py")
    assert argv == ["/py", "-m", "pkg", "--out", str(metrics), "--extra"]
    env = run_env(c, wd, metrics, 2, base={"PYTHONPATH": "/old"})
    assert env["MILES_METRICS_JSONL"] == env["DETAUDIT_METRICS_JSONL"] == str(metrics)
    assert env["W"] == str(wd) and env["DETAUDIT_RUN_INDEX"] == "2"
    assert env["PYTHONPATH"] == f"{tmp_path.parent.resolve()}:/old"


def test_auto_runner_and_defaults(tmp_path: Path) -> None:
    c = load_card(card(tmp_path, 'name = "x"\ncommand = ["true"]\nrunner = "auto"\n'))
    assert c.runner is None and c.metrics_env == "DETAUDIT_METRICS_JSONL" and c.gpus_per_run == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('name = "x"\ncommand = ["a"]\ncolour = "red"\n', r"c\.toml:3: colour: unknown key"),
        ('name = "x"\ncommand = "a b"\n', r"c\.toml:2: command: must be a list of strings, got str"),
        ('name = "x"\ncommand = ["a", 1]\n', r"c\.toml:2: command: must be a list of strings"),
        ('name = "x"\ncommand = ["a"]\ntimeout_s = "10"\n', r"c\.toml:3: timeout_s: must be a number"),
        ('name = "x"\ncommand = ["a"]\ngpus_per_run = true\n', r"c\.toml:3: gpus_per_run: must be an integer"),
        ('name = "x"\ncommand = ["a"]\nrunner = "fast"\n', r"c\.toml:3: runner: must be a list of strings or \"auto\""),
        ('name = "x"\ncommand = ["a"]\nenv = {A = 1}\n', r"c\.toml:3: env: value of 'A' must be a string"),
        ('command = ["a"]\n', r"c\.toml: missing required key 'name'"),
        ('name = "x"\ncommand = []\n', r"c\.toml:2: command: must not be empty"),
        ('name = "x"\ncommand = ["a"\n', r"c\.toml:\d+: invalid TOML"),
    ],
)
def test_bad_cards(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected):
        load_card(card(tmp_path, text))


def test_missing_card(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="none.toml: cannot read recipe card"):
        load_card(tmp_path / "none.toml")


def test_runs_start_in_the_cards_folder_or_its_cwd_and_python_names_the_interpreter(tmp_path: Path) -> None:
    plain = load_card(card(tmp_path, 'name = "x"\ncommand = ["{python}", "train.py"]\n'))
    assert plain.run_cwd == tmp_path.resolve() and plain.python_path == sys.executable
    (tmp_path / "sub").mkdir()
    named = load_card(card(tmp_path, 'name = "x"\ncommand = ["{python}", "t.py"]\ncwd = ".."\npython = "venv/bin/python"\n'))
    assert named.run_cwd == tmp_path.parent.resolve()
    assert named.python_path == str(tmp_path.resolve() / "venv" / "bin" / "python")  # from the card, not resolved
    assert run_argv(named, tmp_path, tmp_path / "m.jsonl")[0] == named.python_path
    with pytest.raises(InputError, match=r"python: must be a path to a Python interpreter"):
        load_card(card(tmp_path, 'name = "x"\ncommand = ["a"]\npython = "{python}"\n'))


def test_the_python_a_command_starts(tmp_path: Path) -> None:
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"}
    assert command_python(load_card(card(tmp_path, 'name = "x"\ncommand = ["{python}", "t.py"]\n')), env) == sys.executable
    named = command_python(load_card(card(tmp_path, f'name = "x"\ncommand = ["{Path(sys.executable).name}"]\n')), env)
    assert Path(named).parent == Path(sys.executable).parent  # found on the run's PATH, not resolved
    script = tmp_path / "launch"
    script.write_text(f"#!/usr/bin/env -S {Path(sys.executable).name} -u\nprint(1)\n")
    script.chmod(0o755)
    assert command_python(load_card(card(tmp_path, 'name = "x"\ncommand = ["./launch", "--x"]\n')), env) == named
    shell = load_card(card(tmp_path, 'name = "x"\ncommand = ["sh", "-c", "python t.py"]\n'))
    with pytest.raises(InputError, match=r"command: cannot tell which Python 'sh' starts"):
        command_python(shell, env)
    assert command_python(load_card(card(tmp_path, 'name = "x"\ncommand = ["sh"]\npython = "/opt/py"\n')), env) == "/opt/py"
    with pytest.raises(InputError, match=r"command: 'no-such-program' is not found"):
        command_python(load_card(card(tmp_path, 'name = "x"\ncommand = ["no-such-program"]\n')), env)
    beside = tmp_path / "venv" / "bin"  # an interpreter named from the card's folder, e.g. a wrapper that execs one
    beside.mkdir(parents=True)
    (beside / "python").symlink_to(sys.executable)
    wrapped = load_card(card(tmp_path, 'name = "x"\ncommand = ["{card_dir}/venv/bin/python", "t.py"]\n'))
    assert command_python(wrapped, env) == str(tmp_path / "venv" / "bin" / "python")


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_probe_runs_in_a_venv_the_card_names(tmp_path: Path) -> None:
    """A card naming a venv's interpreter, by its ``python`` key or by path in the command's first
    word ("{card_dir}/..."), is probed in that venv: a distribution only the venv holds is seen."""
    import subprocess

    from detaudit.run.plan import environment_for

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    marker = Path(purelib) / "only_in_the_card_venv-1.0.dist-info"
    marker.mkdir(parents=True)
    (marker / "METADATA").write_text("Metadata-Version: 2.1\nName: only-in-the-card-venv\nVersion: 1.0\n")
    by_key = load_card(card(tmp_path, 'name = "x"\ncommand = ["{python}", "t.py"]\npython = "venv/bin/python"\n'))
    by_path = load_card(card(tmp_path, 'name = "x"\ncommand = ["{card_dir}/venv/bin/python", "t.py"]\n'))
    ours = load_card(card(tmp_path, 'name = "x"\ncommand = ["{python}", "t.py"]\n'))
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    assert command_python(by_path, env) == str(tmp_path.resolve() / "venv" / "bin" / "python")
    assert "only-in-the-card-venv" in environment_for(by_key)["packages"]
    assert "only-in-the-card-venv" in environment_for(by_path)["packages"]
    assert "only-in-the-card-venv" not in environment_for(ours)["packages"]
