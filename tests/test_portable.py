"""Portable CPU profiles: a card's `portable` key, the settings every run process gets, the class
its standards are bound to, and the machines that cannot honour it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from detaudit.data.card import load_card, probe_env, run_env
from detaudit.data.portable import PROFILES
from detaudit.env.provenance import card_runner_class, detect_environment, runner_class
from detaudit.errors import InputError
from detaudit.runner_class import RunnerClass

PROFILE = PROFILES["x86_64-v1"]


def card(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'name = "p"\ncommand = ["{{python}}", "-c", "pass"]\n{extra}')
    return path


def test_a_portable_card_is_bound_to_the_profile_class_not_the_cpu(tmp_path: Path) -> None:
    loaded = load_card(card(tmp_path, 'portable = "x86_64-v1"\n'))
    assert loaded.portable is PROFILE
    info = {"machine": "x86_64", "cpu": {"vendor": "AuthenticAMD", "family": "25", "model": "17", "flags": ["sse4_2"]},
            "cpu_capability": "DEFAULT"}
    assert card_runner_class(loaded, info) == RunnerClass(("cpu", "x86_64", "portable", "v1"))
    assert str(card_runner_class(loaded, info)) == "cpu-x86_64-portable-v1"
    plain = load_card(card(tmp_path, ""))
    assert card_runner_class(plain, info) == runner_class(info, 0) != card_runner_class(loaded, info)


def test_every_run_process_gets_the_profile_and_the_card_env_cannot_contradict_it(tmp_path: Path) -> None:
    loaded = load_card(card(tmp_path, 'portable = "x86_64-v1"\nenv = {A = "1", OMP_NUM_THREADS = "1"}\n'))
    env = run_env(loaded, tmp_path, tmp_path / "m.jsonl", 0, base={})
    assert {k: env[k] for k in PROFILE.env} == dict(PROFILE.env) and env["A"] == "1"
    assert {k: v for k, v in probe_env(loaded).items() if k in PROFILE.env} == dict(PROFILE.env)
    with pytest.raises(InputError, match=r"c.toml:4: env: OMP_NUM_THREADS='4' contradicts portable profile x86_64-v1"):
        load_card(card(tmp_path, 'portable = "x86_64-v1"\nenv = {OMP_NUM_THREADS = "4"}\n'))


@pytest.mark.parametrize("extra, message", [
    ('portable = "arm-v9"\n', "portable: unknown profile 'arm-v9' (known: x86_64-v1)"),
    ('portable = "x86_64-v1"\ngpus_per_run = 1\n', "cannot be portable"),
    ('portable = "x86_64-v1"\nrunner = ["cpu", "x"]\n', "portable: the card also names a runner class"),
    ("portable = true\n", "portable: must be a portable CPU profile"),
])
def test_bad_portable_keys_are_one_line_errors(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_card(card(tmp_path, extra))


def test_a_machine_that_cannot_honour_the_profile_is_refused_with_the_reason() -> None:
    good = {"machine": "x86_64", "cpu": {"flags": ["avx2", "sse4_2"]}, "cpu_capability": "DEFAULT",
            "threads": {"torch_intra_op": 1}}
    assert PROFILE.refusal(good) is None
    assert "is for x86_64 machines; this one is aarch64" in PROFILE.refusal({**good, "machine": "aarch64"})
    assert "needs CPU flags sse4_2" in PROFILE.refusal({**good, "cpu": {"flags": ["sse2"]}})
    assert "this torch reports AVX512" in PROFILE.refusal({**good, "cpu_capability": "AVX512"})
    assert "runs 4 intra-op threads" in PROFILE.refusal({**good, "threads": {"torch_intra_op": 4}})


def test_this_machines_torch_and_numpy_honour_the_profile(tmp_path: Path) -> None:
    """The probe in the profile's environment: torch runs its DEFAULT kernels on one thread, and numpy
    dispatches nothing above its baseline (the variables act, on whatever CPU runs the tests)."""
    loaded = load_card(card(tmp_path, 'portable = "x86_64-v1"\n'))
    info = detect_environment(env=probe_env(loaded))
    assert PROFILE.refusal(info) is None, PROFILE.refusal(info)
    script = ("import json, numpy; from numpy._core._multiarray_umath import __cpu_features__ as f, __cpu_dispatch__ as d;"
              "print(json.dumps(sorted(k for k in d if f.get(k))))")
    used = subprocess.run([sys.executable, "-c", script], env=probe_env(loaded), capture_output=True, text=True, check=True)
    assert json.loads(used.stdout) == []


def _overriding_card(tmp_path: Path) -> Path:
    """A portable card whose Python path holds a sitecustomize that raises torch's kernel level
    again (as a site's own environment module might): this machine then cannot honour the profile."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text('import os\nos.environ["ATEN_CPU_CAPABILITY"] = "avx2"\n')
    script = tmp_path / "r.py"
    script.write_text("import json, os\nopen(os.environ['DETAUDIT_METRICS_JSONL'], 'w').write(json.dumps({'step': 0, 'x': 1.0}) + '\\n')\n")
    path = tmp_path / "over.toml"
    path.write_text(f'name = "over"\ncommand = ["{{python}}", "{script}"]\nportable = "x86_64-v1"\n'
                    f'pythonpath = ["{site}"]\nstandards_dir = "{tmp_path / "standards"}"\ntimeout_s = 120\n')
    return path


@pytest.mark.slow  # record and verify probe the environment (torch in a child Python)
def test_record_and_verify_refuse_a_machine_that_cannot_honour_the_profile(tmp_path: Path) -> None:
    from conftest import run_cli

    if "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("needs an AVX2 machine: the override asks torch for AVX2 kernels")  # every x86 runner we use has it
    card_path = _overriding_card(tmp_path)
    recorded = run_cli("record", str(card_path), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "w"))
    assert recorded.code == 2, recorded.text
    assert recorded.err.strip() == (f"detaudit: error: {card_path}: cannot record card 'over' here: "
                                    + PROFILE.refusal({**detect_environment(env=probe_env(load_card(card_path))),
                                                       "machine": "x86_64"}))
    assert not (tmp_path / "w").exists() and not (tmp_path / "standards").exists()
    # With no standard at all the refusal comes first: this machine could prove nothing either way.
    unrecorded = run_cli("verify", str(card_path), "--json")
    assert unrecorded.code == 1 and json.loads(unrecorded.out)["status"] == "profile-refused", unrecorded.text
    # A portable standard recorded elsewhere is not verified here: NOT VERIFIED, with the reason, exit 1.
    standard = tmp_path / "standards" / "over.cpu-x86_64-portable-v1.json"
    standard.parent.mkdir()
    standard.write_text(json.dumps({"meta": {}, "metrics": {"x": [[0, 1.0]]}}))
    verified = run_cli("verify", str(card_path), "--json")
    assert verified.code == 1, verified.text
    doc = json.loads(verified.out)
    assert doc["status"] == "profile-refused" and "this torch reports AVX2" in doc["refusal"], doc
    text = run_cli("verify", str(card_path))
    assert text.code == 1 and "NOT VERIFIED: portable profile x86_64-v1" in text.out, text.out
