"""``trace --against`` tells the environment from the computation (issue #42): package versions
that differ come first; ops inside a library whose version differs are grouped under it; the
first difference of the pipeline's own computation (a module, an op elsewhere) decides.

The library is a real installed package (a wheel pip puts in a --target folder on the run's
PYTHONPATH) in two versions whose start-up builds a different constant tensor, as transformers
5.24 and 5.25 did (``torch.tensor at transformers/modeling_utils.py:248``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import run_cli, run_traced, write_card

from detaudit.render.trace import comparison_lines
from detaudit.trace.compare import compare_traces, site_package
from detaudit.trace.files import read_trace

pytestmark = pytest.mark.recipe

LIBRARY = """import torch

def start():
    return torch.tensor([1.0, {constant}])  # its own start-up constant (differs between versions)

def prepare(x):
    return x * 2
"""

# The pipeline: the library's start-up, then a module fed by the library's prepare().
PIPELINE = """import torch, fakelib
constant = fakelib.start()
torch.manual_seed(0)
layer = torch.nn.Linear(2, 2)
x = fakelib.prepare(torch.ones(1, 2))
{feed}
layer(x)
"""
APART = PIPELINE.replace("{feed}", "")
REACHES = PIPELINE.replace("{feed}", "x = x + constant  # the start-up constant reaches the module")


def _wheel(folder: Path, version: str, constant: str) -> Path:
    """A pure-Python wheel of ``fakelib`` at ``version``."""
    info = f"fakelib-{version}.dist-info"
    files = {"fakelib/__init__.py": LIBRARY.format(constant=constant).encode(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: fakelib\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"fakelib-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel


def _install(tmp_path: Path, target: Path, version: str, constant: str) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    folder = tmp_path / f"wheel-{version}-{constant}"
    folder.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                           str(target), str(_wheel(folder, version, constant))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return target


def test_a_call_site_lies_in_the_distribution_of_its_top_level_module() -> None:
    assert site_package("transformers/modeling_utils.py:248 _init_weights") == "transformers"
    assert site_package("PIL/Image.py:10 open") == "pillow"
    assert site_package("typing_extensions.py:3 f") == "typing-extensions"
    assert site_package("?") == "" and site_package("<frozen importlib._bootstrap>:1 x") == ""


@pytest.mark.slow
def test_against_groups_a_changed_librarys_own_ops_and_lets_the_pipelines_computation_decide(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    card = write_card(tmp_path / "env.toml", name="env", recipe=tmp_path / "pipeline.py",
                      extra=f'[env]\nPYTHONPATH = "{lib}"\n')
    (tmp_path / "pipeline.py").write_text(APART)
    _install(tmp_path, lib, "5.24.0", "2.0")
    saved = tmp_path / "saved"
    first = run_cli("trace", str(card), "--modules", "--save", str(saved), "--workdir", str(tmp_path / "w1"))
    assert first.code == 0, first.out + first.err
    assert json.loads((saved / "meta.json").read_text())["packages"]["fakelib"] == "5.24.0"

    # Another version of the library, whose start-up constant differs: its op differs, the pipeline's computation not.
    _install(tmp_path, lib, "5.25.0", "2.5")
    other = run_cli("trace", str(card), "--modules", "--against", str(saved), "--workdir", str(tmp_path / "w2"))
    text = " ".join(other.out.split())
    assert other.code == 0, other.out + other.err
    assert (f"environment: 1 package version(s) differ: fakelib 5.24.0 (saved {saved}) vs 5.25.0 (this run)") in text
    assert (f"inside fakelib 5.24.0 (saved {saved}) vs 5.25.0 (this run), not the pipeline's own computation: "
            "main process: op torch.tensor at fakelib/__init__.py:4 start (called from pipeline.py:2 <module>), "
            "call 1: first differing output, but its inputs differ too") in text
    assert "traces identical" in text and "(ops inside libraries whose version differs aside)" in text

    # The same change under the same version number is the computation's: it decides.
    _install(tmp_path, lib, "5.24.0", "2.5")
    same = run_cli("trace", str(card), "--modules", "--against", str(saved), "--workdir", str(tmp_path / "w3"))
    assert same.code == 1, same.out + same.err
    assert "environment:" not in same.out and "first differing op: main process: op torch.tensor at " \
        "fakelib/__init__.py:4 start" in " ".join(same.out.split())


@pytest.mark.slow
def test_an_op_of_a_changed_library_whose_tensor_reaches_a_module_is_named_by_the_module(tmp_path: Path) -> None:
    """The library's constant feeds the pipeline's module: the module decides, after the environment."""
    traces = []
    for name, version, constant in (("a", "5.24.0", "2.0"), ("b", "5.25.0", "2.5")):
        lib = _install(tmp_path, tmp_path / f"lib-{name}", version, constant)
        trace_dir, _ = run_traced(tmp_path, REACHES, mode="modules", name=name, pythonpath=[lib])
        run = read_trace(trace_dir)
        run.packages = {"fakelib": version, "torch": "2.13.0"}  # what the probe of each environment gives
        traces.append(run)
    cmp = compare_traces(*traces, labels=("saved", "this run"))
    assert not cmp.identical
    assert [g.package.name for g in cmp.libraries] == ["fakelib"] and cmp.libraries[0].ops[0].call.name == "torch.tensor"
    assert cmp.module is not None and cmp.module.call.name == "Linear" and not cmp.module.inputs_match
    assert cmp.op is not None and cmp.op.call.name == "Tensor.add"  # where the constant met the pipeline's data
    lines = comparison_lines(cmp)
    assert lines[0] == "environment: 1 package version(s) differ: fakelib 5.24.0 (saved) vs 5.25.0 (this run)"
    assert lines[1].startswith("inside fakelib 5.24.0 (saved) vs 5.25.0 (this run), not the pipeline's own "
                               "computation: main process: op torch.tensor at fakelib/__init__.py:4 start")
    assert lines[2] == "the first difference in the pipeline's own computation:"
    assert lines[3].startswith("first differing module: main process: module Linear (Linear)")
