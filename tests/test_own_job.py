"""A team's own training job, gated (issue #38): `init` writes a card beside the script, runs start in
the card's folder, `record --metrics` makes a standard from runs already made, `verify --metrics`
says when it could not check the runner class, the environment is probed in the Python the card's
command starts, and what differs in it is named bit-relevant first."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import run_cli, write_card, write_jsonl

# A user's training loop in small: one JSON object per step, steps 0, 10, 20, ... (not line numbers);
# --ulp moves the loss of step 30 by one unit in the last place.
TRAIN = '''
import argparse, json, math, os, random
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--ulp", action="store_true")
args = parser.parse_args()
rng = random.Random(0)
weight = 1.0
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
    for i in range(args.steps):
        weight -= 0.1 * (weight - rng.random())
        loss = weight * weight
        if args.ulp and i == 3:
            loss = math.nextafter(loss, math.inf)
        fh.write(json.dumps({"step": 10 * i, "loss": loss, "lr": 0.1}) + "\\n")
'''


def project(tmp_path: Path) -> Path:
    """A small project: pyproject.toml at its root, the training script in train/."""
    root = tmp_path / "proj"
    (root / "train").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\n')
    (root / "train" / "train.py").write_text(TRAIN)
    return root


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_init_writes_a_card_beside_the_script_and_never_replaces_one(tmp_path: Path) -> None:
    root = project(tmp_path)
    made = run_cli("init", "--", "python", "train.py", "--steps", "5", cwd=root / "train")
    assert made.code == 0, made.text
    card = root / "train" / "detaudit.toml"
    doc = tomllib.loads(card.read_text())
    assert doc["name"] == "train" and doc["command"] == ["python", "train.py", "--steps", "5"]
    assert "cwd" not in doc  # runs start in the card's folder: where train.py is
    assert doc["env"] == {"PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # what the doctor asks for
    doctor = run_cli("doctor", str(card), "--no-ray", "--json", cwd=root / "train")
    rows = {row["check"]: row["ok"] for row in json.loads(doctor.out) if row["process"] == "run process at start"}
    assert rows["PYTHONHASHSEED"] is True, doctor.text  # a first record of an init card shows no FAIL row for it
    assert "detaudit record detaudit.toml --runs 3" in made.out and "DETAUDIT_METRICS_JSONL" in made.out
    before = card.read_bytes()
    again = run_cli("init", "--", "python", "train.py", cwd=root / "train")
    assert again.code == 2 and again.err == f"detaudit: error: {card}: exists; pass --force to replace it (or --out another file)\n"
    assert card.read_bytes() == before
    # From the project root: the card still goes beside the script, and its runs start where init ran.
    from_root = run_cli("init", "--name", "job", "--", "python", "train/train.py", "--steps", "5", cwd=root)
    assert from_root.code == 2  # that card exists
    made = run_cli("init", "--out", "cards/job.toml", "--", "python", "train/train.py", cwd=root)
    assert made.code == 0, made.text
    doc = tomllib.loads((root / "cards" / "job.toml").read_text())
    assert doc["cwd"] == ".." and doc["command"] == ["python", "train/train.py"]
    bad = run_cli("init", "--out", "x.toml", "--metrics-env", "NOT A NAME", "--", "python", "train/train.py", cwd=root)
    assert bad.code == 2 and "metrics_env" in bad.err and not (root / "x.toml").exists()


@pytest.mark.slow
def test_own_job_init_record_verify_and_a_one_ulp_change(tmp_path: Path) -> None:
    root = project(tmp_path)
    # The step field named (failclosed's detection finds `step` by itself; this test is about the path).
    assert run_cli("init", "--step-key", "step", "--", "python", "train.py", "--steps", "5", cwd=root / "train").code == 0
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # `python`: this venv's
    recorded = run_cli("record", "train/detaudit.toml", "--runs", "2", "--no-doctor", cwd=root, env=path)
    assert recorded.code == 0, recorded.text
    standards = list((root / "standards").glob("train.*.json"))  # beside pyproject.toml: the project root
    assert len(standards) == 1 and "RECORDED" in recorded.out
    passed = run_cli("verify", "train/detaudit.toml", cwd=root, env=path)
    assert passed.code == 0 and "PASSED" in passed.out, passed.text
    changed = run_cli("verify", "train/detaudit.toml", "--junit-xml", "r.xml", "--", "--ulp", cwd=root, env=path)
    assert changed.code == 1 and "FAILED: 1 of 2 metric series" in changed.out, changed.text
    assert "loss: step 30: standard" in changed.out and "1 ULPs" in changed.out  # the step field, not the line
    assert '<failure' in (root / "r.xml").read_text() and 'name="loss"' in (root / "r.xml").read_text()


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_runs_start_in_the_cards_folder_or_the_one_it_names(tmp_path: Path) -> None:
    root = project(tmp_path)
    card = root / "train" / "c.toml"
    card.write_text('name = "c"\ncommand = ["{python}", "train.py"]\nrunner = ["cpu", "test"]\n')
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor", cwd=tmp_path).code == 0
    named = root / "cards" / "d.toml"  # a card elsewhere that names the folder its runs start in
    named.parent.mkdir()
    named.write_text('name = "d"\ncommand = ["{python}", "train/train.py"]\ncwd = ".."\nrunner = ["cpu", "test"]\n')
    result = run_cli("record", str(named), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert result.code == 0, result.text
    assert sorted(p.name for p in (root / "train").iterdir()) == ["c.toml", "train.py"]  # outputs went to run dirs
    missing = root / "cards" / "e.toml"
    missing.write_text('name = "e"\ncommand = ["{python}", "train.py"]\ncwd = "nowhere"\nrunner = ["cpu", "test"]\n')
    failed = run_cli("record", str(missing), "--runs", "2", "--no-doctor", cwd=tmp_path)
    assert failed.code == 1 and "nowhere" in failed.text


# -- the probe runs in the card's own interpreter (#39) ----------------------------------------------

@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with nothing installed (no torch): the interpreter of another environment."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_probe_runs_in_the_python_the_command_starts(tmp_path: Path, bare_python: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    card = tmp_path / "other.toml"
    card.write_text(f'name = "other"\ncommand = [{json.dumps(str(bare_python))}, "train.py"]\n')
    env = json.loads(run_cli("env", str(card), "--json", cwd=tmp_path).out)["environment"]
    assert "torch" not in env and env["packages"] == {}  # that interpreter's, not detaudit's own
    here = json.loads(run_cli("env", str(write_card(tmp_path / "mine.toml")), "--json").out)["environment"]
    assert "torch" in here
    # A portable profile that other Python cannot honour (no torch to report its kernels) is refused.
    card.write_text(card.read_text() + 'portable = "x86_64-v1"\n')
    refused = run_cli("record", str(card), "--runs", "2", "--no-doctor", cwd=tmp_path)
    assert refused.code == 2 and "cannot record card 'other' here" in refused.err, refused.text
    # Through a script's #! line (a console script, torchrun), and by the card's `python` key.
    launcher = tmp_path / "launch"
    launcher.write_text(f"#!{bare_python}\nimport runpy; runpy.run_path('train.py', run_name='__main__')\n")
    launcher.chmod(0o755)
    card.write_text(f'name = "other"\ncommand = ["./launch"]\n')
    assert "torch" not in json.loads(run_cli("env", str(card), "--json", cwd=tmp_path).out)["environment"]
    card.write_text(f'name = "other"\ncommand = ["sh", "-c", "python train.py"]\npython = {json.dumps(str(bare_python))}\n')
    assert "torch" not in json.loads(run_cli("env", str(card), "--json", cwd=tmp_path).out)["environment"]


def test_a_command_that_starts_no_python_detaudit_can_name_is_refused(tmp_path: Path) -> None:
    card = tmp_path / "sh.toml"
    card.write_text('name = "sh"\ncommand = ["sh", "-c", "python train.py"]\nrunner = ["cpu", "test"]\n')
    for args in (("env", str(card)), ("record", str(card), "--no-doctor")):
        refused = run_cli(*args)
        assert refused.code == 2, refused.text
        assert refused.err.startswith(f"detaudit: error: {card}: command: cannot tell which Python 'sh' starts")
        assert 'python = "PATH"' in refused.err and "Traceback" not in refused.err
    assert not (tmp_path / "standards").exists()


# -- record --metrics: a standard from runs already made ---------------------------------------------

def night(tmp_path: Path, name: str, loss3: float = 0.25) -> Path:
    lines = [json.dumps({"step_key": "step", "step": s, "loss": 1 / (s + 1) if s != 3 else loss3,
                         "perf/time_s": 0.1 * s + len(name)}) for s in range(5)]
    return write_jsonl(tmp_path / f"{name}.jsonl", lines)


def test_record_from_metrics_files_writes_only_when_they_agree(tmp_path: Path) -> None:
    a, b, c = night(tmp_path, "a"), night(tmp_path, "b"), night(tmp_path, "c", loss3=0.2500000000000001)
    out = tmp_path / "std" / "train.json"
    disagree = run_cli("record", "--metrics", str(a), str(c), "--out", str(out))
    assert disagree.code == 1 and "runs disagree" in disagree.out and not out.parent.exists()
    written = run_cli("record", "--metrics", str(a), str(b), "--out", str(out), "--runner-class", "cpu-intel-6.207-avx512")
    assert written.code == 0 and "RECORDED: 1 metric series identical across 2 runs" in written.out, written.text
    doc = json.loads(out.read_text())
    assert "-".join(doc["runner"]["class"]) == "cpu-intel-6.207-avx512" and doc["recorded"]["runs"] == 2
    assert doc["recorded"]["metrics"] == [str(a), str(b)] and "perf/time_s" in doc["excluded"]["series"]
    before = out.read_bytes()
    exists = run_cli("record", "--metrics", str(a), str(b), "--out", str(out))
    assert exists.code == 2 and exists.err == f"detaudit: error: {out}: exists; pass --update to replace it\n"
    assert out.read_bytes() == before
    assert run_cli("record", "--metrics", str(a), str(b), "--out", str(out), "--update").code == 0
    for args, word in (((str(a),), "at least two"), ((str(a), str(b)), "--out"),
                       ((str(a), str(b), "--out", str(out), "--update", "--runs", "4"), "--runs"),
                       ((str(a), str(b), "--out", str(out), "--update", "--workdir", str(tmp_path)), "--workdir")):
        refused = run_cli("record", "--metrics", *args)
        assert refused.code == 2 and word in refused.err, (args, refused.text)
    unclassed = run_cli("record", "--metrics", str(a), str(b), "--out", str(tmp_path / "n.json"))
    assert unclassed.code == 0 and "no --runner-class" in unclassed.err


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_verify_metrics_says_when_the_runner_class_was_not_checked(tmp_path: Path) -> None:
    a, b = night(tmp_path, "a"), night(tmp_path, "b")
    std = tmp_path / "s.json"
    assert run_cli("record", "--metrics", str(a), str(b), "--out", str(std), "--runner-class", "h100-1gpu").code == 0
    unchecked = run_cli("verify", "--metrics", str(a), "--standard", str(std))
    assert unchecked.code == 0 and "runner class not checked: the standard is for runner class h100-1gpu" in unchecked.out
    doc = json.loads(run_cli("verify", "--metrics", str(a), "--standard", str(std), "--json").out)
    assert doc["runner_unchecked"] and doc["runner_class"] is None
    same = run_cli("verify", "--metrics", str(a), "--standard", str(std), "--runner-class", "h100-1gpu")
    assert same.code == 0 and "not checked" not in same.text
    other = run_cli("verify", "--metrics", str(a), "--standard", str(std), "--runner-class", "cpu-intel-6.207-avx512")
    assert other.code == 1 and "NOT VERIFIED: no standard for runner class cpu-intel-6.207-avx512" in other.out
    skipped = run_cli("verify", "--metrics", str(a), "--standard", str(std), "--runner-class", "a100-1gpu",
                      "--allow-other-runner")
    assert skipped.code == 0 and "SKIPPED" in skipped.out
    unclassed = tmp_path / "u.json"  # a standard that names no class: nothing to check either class against
    assert run_cli("record", "--metrics", str(a), str(b), "--out", str(unclassed)).code == 0
    for given in ((), ("--runner-class", "h100-1gpu")):
        silent = run_cli("verify", "--metrics", str(a), "--standard", str(unclassed), *given)
        assert silent.code == 0 and "runner class not checked: the standard names no runner class" in silent.out
    bad = run_cli("verify", "--metrics", str(a), "--standard", str(std), "--runner-class", "cpu-Bad Class")
    assert bad.code == 2 and "--runner-class" in bad.err


def test_verify_of_a_file_never_drops_arguments_meant_for_a_run(tmp_path: Path, toy_card: Path) -> None:
    a = night(tmp_path, "a")
    refused = run_cli("verify", str(toy_card), "--metrics", str(a), "--", "--steps", "4")
    assert refused.code == 2 and "the arguments after -- would be dropped" in refused.err, refused.text


# -- what differs in the environment: bit-relevant packages first -----------------------------------

@pytest.mark.slow
def test_environment_differences_name_bit_relevant_packages_first(tmp_path: Path, toy_card: Path) -> None:
    assert run_cli("record", str(toy_card), "--runs", "2", "--no-doctor").code == 0
    std = toy_card.parent / "standards" / "toy.cpu-test.json"
    doc = json.loads(std.read_text())
    packages = doc["runner"]["packages"]
    packages["torch"] = "1.0.0"
    packages["numpy"] = "0.1"
    for name in ("aaa-unrelated", "bbb-unrelated", "ccc-unrelated"):
        packages[name] = "9.9"
    std.write_text(json.dumps(doc))
    passed = run_cli("verify", str(toy_card))
    assert passed.code == 0, passed.text
    warning = [line for line in passed.err.splitlines() if "the bits match" in line]
    assert len(warning) == 1, passed.err
    assert "numpy: standard 0.1" in warning[0] and "torch: standard 1.0.0" in warning[0]
    assert "aaa-unrelated" not in warning[0] and "and 3 other package(s)" in warning[0]
    assert f"detaudit env {toy_card} --diff {std}" in warning[0]
    listed = run_cli("env", str(toy_card), "--diff", str(std))
    assert listed.code == 0, listed.text
    text = listed.out
    assert text.index("packages that can change bits: 2") < text.index("torch: standard 1.0.0") < \
        text.index("other packages: 3") < text.index("aaa-unrelated: standard 9.9, here absent")


# -- one card parse per command (#40), the record lock on a full disk (#39) --------------------------

@pytest.mark.slow
def test_a_command_parses_its_card_once(tmp_path: Path, toy_card: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib as toml

    from click.testing import CliRunner

    from detaudit.cli import main

    scan = tmp_path / "scan.json"
    assert run_cli("scan-rng", str(tmp_path), "--format", "json").code == 0
    scan.write_text(run_cli("scan-rng", str(tmp_path), "--format", "json").out)
    parses = []
    real = toml.loads

    def counting(text: str, **kwargs: object) -> dict:
        parses.append(text[:20])
        return real(text, **kwargs)

    monkeypatch.setattr(toml, "loads", counting)
    result = CliRunner().invoke(main, ["record", str(toy_card), "--runs", "2", "--html", str(tmp_path / "r.html"),
                                       "--scan", str(scan), "--no-doctor"])
    assert result.exit_code == 0, result.output
    assert len(parses) == 1, parses


def test_the_record_lock_fails_in_one_line_on_a_full_disk_and_leaves_nothing(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", extra="")
    card.write_text(card.read_text().replace(f'standards_dir = "{tmp_path / "standards"}"',
                                             f'standards_dir = "{tmp_path / "deep" / "standards"}"'))

    def no_room() -> None:  # every write of a file fails, as on a full disk (EFBIG instead of ENOSPC)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    proc = subprocess.run([sys.executable, "-m", "detaudit", "record", str(card), "--runs", "2", "--no-doctor"],
                          capture_output=True, text=True, preexec_fn=no_room, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaudit: error: ") and "cannot write the lock" in lines[0], lines
    assert not (tmp_path / "deep").exists()  # no .lock, and no folder made for it
