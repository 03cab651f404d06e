"""Provenance: what changes bits is recorded, the runner class separates CPUs that differ, and
verify names every differing field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.runner_class import RunnerClass
from detaudit.data.card import load_card, probe_env
from detaudit.env.probes.envprobe import cpu_info
from detaudit.errors import InputError
from detaudit.env.provenance import (
    detect_environment,
    package_differences,
    provenance_differences,
    runner_class,
    standard_runner,
)

# The first processor block of /proc/cpuinfo on the two machines of docs/standards-across-machines.md
# (flags shortened to those that matter plus a few that do not).
AMD_ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni ht pdpe1gb

processor\t: 1
vendor_id\t: SomethingElse
"""
INTEL_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni amx_tile amx_bf16 amx_int8 ht
"""


def _info(cpuinfo: str, capability: str = "AVX512") -> dict:
    return {"cpu": cpu_info(cpuinfo, "x86_64"), "cpu_capability": capability}


def test_cpu_info_reads_the_first_processor_and_keeps_kernel_flags_only() -> None:
    amd = cpu_info(AMD_ZEN4, "x86_64")
    assert amd["vendor"] == "AuthenticAMD" and (amd["family"], amd["model"], amd["stepping"]) == ("25", "17", "1")
    assert amd["model_name"] == "AMD EPYC 9R14 96-Core Processor"
    assert "avx512_bf16" in amd["flags"] and "ht" not in amd["flags"] and "pdpe1gb" not in amd["flags"]
    assert amd["flags"] == sorted(amd["flags"])


def test_same_isa_on_two_vendors_is_two_runner_classes() -> None:
    # Both dispatch torch's AVX512 kernels, yet the tiny recipe's bits differ between them.
    amd = runner_class(_info(AMD_ZEN4), 0)
    intel = runner_class(_info(INTEL_AMX), 0)
    assert amd == RunnerClass(("cpu", "amd-25.17", "avx512"))
    assert intel == RunnerClass(("cpu", "intel-6.143", "avx512", "amx"))
    assert runner_class(_info(AMD_ZEN4, "AVX2"), 0) == RunnerClass(("cpu", "amd-25.17", "avx2"))
    gpu = {"gpu": {"name": "NVIDIA H200", "count": 1}, **_info(INTEL_AMX)}
    assert runner_class(gpu, 1) == RunnerClass(("h200", "1gpu"))


def test_every_differing_field_is_named_and_packages_apart() -> None:
    recorded = standard_runner(RunnerClass(("cpu", "intel-6.143", "avx512", "amx")), {
        **_info(INTEL_AMX), "torch": "2.13.0+cpu", "threads": {"torch_intra_op": 2},
        "packages": {"torch": "2.13.0+cpu", "transformers": "5.17.0", "gone": "1"}})
    here = {**_info(AMD_ZEN4), "torch": "2.13.0+cpu", "threads": {"torch_intra_op": 2, "OMP_NUM_THREADS": "1"},
            "packages": {"torch": "2.13.0+cpu", "transformers": "5.24.0", "new": "2"}}
    lines = provenance_differences(recorded, here)
    assert "cpu.vendor: standard 'GenuineIntel', here 'AuthenticAMD'" in lines
    assert "cpu.model: standard '143', here '17'" in lines
    assert any(line.startswith("cpu.flags: standard [") and "amx_tile" in line for line in lines)
    assert "threads.OMP_NUM_THREADS: standard absent, here '1'" in lines
    assert not any(line.startswith(("torch:", "class", "packages")) for line in lines)
    assert package_differences(recorded, here) == [
        "gone: standard 1, here absent", "new: standard absent, here 2", "transformers: standard 5.17.0, here 5.24.0"]
    # A standard from an older detaudit that kept fewer fields says what it cannot compare.
    old = provenance_differences({"class": ["cpu", "avx512"], "cpu_capability": "AVX512"}, here)
    assert old[-1].startswith("not recorded in the standard (cannot compare): ") and "cpu" in old[-1]
    assert package_differences({"class": ["cpu"]}, here) == []


@pytest.mark.slow
def test_probe_runs_in_the_cards_environment(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path / "c.toml", extra='env = {ATEN_CPU_CAPABILITY = "default", OMP_NUM_THREADS = "1"}\n'))
    info = detect_environment(env=probe_env(card))
    assert info["cpu_capability"] == "DEFAULT"  # torch honours the card's dispatch cap, so the class does too
    assert info["threads"]["OMP_NUM_THREADS"] == "1" and info["threads"]["torch_intra_op"] == 1
    assert runner_class(info, 0).parts[2] == "default"
    assert info["packages"]["torch"].startswith(info["torch"].split("+")[0])
    assert info["torch_config"]["blas"] and info["cpu"]["vendor"]
    gpus = probe_env(card, ["3", "5"])
    assert gpus["CUDA_VISIBLE_DEVICES"] == "3,5"


def test_probe_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot probe the run's environment"):
        detect_environment(python=str(tmp_path / "no-python"))
    broken = tmp_path / "py"
    broken.write_text("#!/bin/sh\necho not json\n")
    broken.chmod(0o755)
    with pytest.raises(InputError, match="cannot probe"):
        detect_environment(python=str(broken))


@pytest.mark.slow
def test_env_command_prints_the_class_record_uses(tmp_path: Path) -> None:
    card = write_card(tmp_path / "c.toml", extra='env = {ATEN_CPU_CAPABILITY = "avx2"}\n')
    text = run_cli("env", str(card))
    assert text.code == 0, text.text
    assert "runner class: cpu-test" in text.out  # the card names its class
    doc = json.loads(run_cli("env", "--json", str(REPO / "recipes" / "sd3_pickscore_nft.toml")).out)
    assert doc["runner_class"][0] == "cpu" and doc["runner_class"] == runner_class(doc["environment"], 0).to_json()
    assert doc["environment"]["cpu"]["vendor"] in open("/proc/cpuinfo").read()
    bad = run_cli("env", str(tmp_path / "missing.toml"))
    assert bad.code == 2 and bad.err.startswith("detaudit: error: ") and len(bad.err.strip().splitlines()) == 1


@pytest.mark.slow
def test_verify_names_differing_fields_and_warns_on_package_versions(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    std = tmp_path / "std.json"
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor", "--out", str(std)).code == 0
    doc = json.loads(std.read_text())
    assert doc["runner"]["cpu"]["vendor"] and doc["runner"]["packages"]["click"]
    doc["runner"]["packages"]["click"] = "0.0.1"
    doc["runner"]["packages"]["torch"] = "0.0.2"
    doc["runner"]["cpu"]["model"] = "999"
    std.write_text(json.dumps(doc))
    passed = run_cli("verify", str(card), "--standard", str(std))
    assert passed.code == 0 and "PASSED" in passed.out
    # torch can change bits: named; click cannot: counted, with the command that lists it.
    assert "2 package version(s) differ" in passed.err and "torch: standard 0.0.2" in passed.err
    assert "click" not in passed.err and "and 1 other package(s)" in passed.err and "--diff" in passed.err
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step_key": "step", "step": 0, "loss": 5.0}\n')
    failed = run_cli("verify", str(card), "--standard", str(std), "--metrics", str(metrics))
    assert failed.code == 1
    assert "cpu.model: standard '999'" in failed.out and "torch: standard 0.0.2" in failed.out
    assert "and 1 other package(s)" in failed.out


PACKAGES_READ = """
import json, re, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
from importlib import metadata
import envprobe
full = {}  # importlib.metadata's own reading: every file parsed whole
for dist in metadata.distributions():
    names = dist.metadata.get_all("Name") or []
    name = (names[0] if names and names[0] else "").strip()
    if name:
        full.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
print(json.dumps([envprobe._packages(), dict(sorted(full.items()))]))
"""


def test_the_probe_reads_each_packages_name_and_version_as_importlib_metadata_does(tmp_path: Path) -> None:
    """The probe parses only each metadata file's headers (~10x faster than ``dist.metadata``); the
    names and versions must be what importlib.metadata reads from the whole file: CRLF lines, a
    folded header, a single-file egg-info, a body that repeats Name and Version, a first empty Name."""
    site = tmp_path / "site"
    (site / "A_Pkg-1.0.dist-info").mkdir(parents=True)
    (site / "A_Pkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: A_Pkg\nVersion: 1.0\nSummary: a summary\n  folded onto two lines\n\n"
        "Name: not-this\nVersion: 9.9\n")
    (site / "b-2.0-py3.11.egg-info").write_text("Metadata-Version: 1.0\nName: b\nVersion: 2.0\n")
    (site / "c-3.dist-info").mkdir()
    (site / "c-3.dist-info" / "METADATA").write_bytes(b"Name: c\r\nVersion: 3\r\n\r\nVersion: 4\r\n")
    (site / "d-5.dist-info").mkdir()
    (site / "d-5.dist-info" / "METADATA").write_text("Name: \nName: d.e\nVersion: 5.post1\n")
    probes = REPO / "detaudit" / "env" / "probes"
    out = subprocess.run([sys.executable, "-S", "-c", PACKAGES_READ, str(probes), str(site)], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    fast, full = json.loads(out)
    assert fast == full and fast == {"a-pkg": "1.0", "b": "2.0", "c": "3"}, (fast, full)
