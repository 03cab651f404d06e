"""The environment probe's cache (detaudit/env/probes/probe_cache.py): what importing a CPU build
of torch told the probe is kept per torch build, machine and environment; anything in the key
that changes probes again, a device build is never kept, a damaged entry is probed again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detaudit.env import provenance
from detaudit.env.provenance import PROBE_SCRIPT, detect_environment, probe_cache_dir

# A torch that imports in milliseconds: the probe reads only these names.
FAKE_TORCH = '''
import types
from . import version
__version__ = version.__version__
__config__ = types.SimpleNamespace(show=lambda: "BLAS_INFO=fake, OpenMP 201511")
def get_num_threads(): return {threads}
def get_num_interop_threads(): return 1
backends = types.SimpleNamespace(cpu=types.SimpleNamespace(get_cpu_capability=lambda: "FAKE"))
cuda = types.SimpleNamespace(is_available=lambda: False)
'''


def fake_torch(root: Path, version: str = "9.9.0", cuda: str | None = None, threads: int = 3) -> Path:
    """A torch package that says ``version``; written again over an old one, it is a reinstall, whose
    compiled files are new too: Python checks a .pyc against its source's size and mtime in whole
    seconds, and these files keep their size, so an old .pyc would still be imported within the second."""
    shutil.rmtree(root / "torch" / "__pycache__", ignore_errors=True)
    (root / "torch").mkdir(parents=True, exist_ok=True)
    (root / "torch" / "version.py").write_text(f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n")
    (root / "torch" / "__init__.py").write_text(FAKE_TORCH.format(threads=threads))
    return root


def probe(cache: Path | None, **env: str) -> tuple[dict, str]:
    """Run the probe script as detect_environment does; (its JSON, where the torch part came from)."""
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env
    args = [sys.executable, str(PROBE_SCRIPT), *(["--cache", str(cache)] if cache else [])]
    proc = subprocess.run(args, capture_output=True, text=True, env=full, timeout=180, check=True)
    source = proc.stderr.strip().splitlines()[-1].removeprefix("envprobe: torch part ") if cache else "no cache"
    return json.loads(proc.stdout), source


def test_a_fake_torch_is_probed_once_then_read_and_any_change_probes_again(tmp_path: Path) -> None:
    cache, fake = tmp_path / "cache", fake_torch(tmp_path / "fake")
    first, source = probe(cache, PYTHONPATH=str(fake))
    assert source == "probed" and first["torch"] == "9.9.0" and first["threads"]["torch_intra_op"] == 3
    assert len(list(cache.iterdir())) == 1
    again, source = probe(cache, PYTHONPATH=str(fake), PYTEST_CURRENT_TEST="another test", COLUMNS="80")
    assert (source, again) == ("cached", first)  # volatile names are not in the key
    # The environment: a variable the probe does not know of still counts.
    _, source = probe(cache, PYTHONPATH=str(fake), SOME_LIBRARY_SETTING="1")
    assert source == "probed"
    # A thread variable: probed again, and what it says is what a fresh probe says.
    threads, source = probe(cache, PYTHONPATH=str(fake), OMP_NUM_THREADS="1")
    assert source == "probed" and threads["threads"]["OMP_NUM_THREADS"] == "1"
    # torch's files: the same path, another build (a reinstall changes size or mtime).
    fake_torch(fake, version="9.9.1", threads=5)
    changed, source = probe(cache, PYTHONPATH=str(fake))
    assert source == "probed" and changed["torch"] == "9.9.1" and changed["threads"]["torch_intra_op"] == 5
    # Another torch on the path.
    other, source = probe(cache, PYTHONPATH=str(fake_torch(tmp_path / "other", version="1.0.0")))
    assert source == "probed" and other["torch"] == "1.0.0"


def test_a_device_build_is_never_kept_and_a_damaged_entry_is_probed_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gpu = fake_torch(tmp_path / "gpu", cuda="12.4")
    for _ in range(2):
        info, source = probe(cache, PYTHONPATH=str(gpu))
        assert source.startswith("not cached: a device build") and info["torch"] == "9.9.0"
    assert not cache.exists()
    cpu = fake_torch(tmp_path / "cpu")
    fresh, _ = probe(cache, PYTHONPATH=str(cpu))
    (entry,) = cache.iterdir()
    for damage in ("{not json", json.dumps({"format": 1, "torch_part": {"torch": 7}}), "[]"):
        entry.write_text(damage)
        info, source = probe(cache, PYTHONPATH=str(cpu))
        assert (source, info) == ("probed", fresh)
        assert probe(cache, PYTHONPATH=str(cpu))[1] == "cached"  # written again


def test_the_cache_folder_is_chosen_by_the_variable_and_off_keeps_nothing(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(provenance.PROBE_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache_dir() == tmp_path / "xdg" / "detaudit" / "envprobe"
    monkeypatch.setenv(provenance.PROBE_CACHE_ENV, "off")
    assert probe_cache_dir() is None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(fake_torch(tmp_path / "f"))}
    assert detect_environment(env=env)["torch"] == "9.9.0" and not (tmp_path / "xdg").exists()
    monkeypatch.setenv(provenance.PROBE_CACHE_ENV, str(tmp_path / "mine"))
    assert detect_environment(env=env)["torch"] == "9.9.0" and len(list((tmp_path / "mine").iterdir())) == 1


@pytest.mark.slow  # imports the real torch twice (~3 s on 2 cores)
def test_the_real_torch_read_from_the_cache_is_what_a_probe_without_it_says(tmp_path: Path) -> None:
    plain, _ = probe(None)
    first, source = probe(tmp_path)
    assert source == "probed" and first == plain
    again, source = probe(tmp_path)
    assert source == "cached" and again == plain
