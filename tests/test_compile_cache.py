"""torch.compile's portable cache artifacts (issue #42): ``record`` ships run 1's next to the
standard, ``verify`` loads them, and the bits are the same with and without them.

Real compiles (Inductor's C++ on the CPU, in fresh interpreters, each with an empty Inductor
cache dir, so that nothing but the shipped artifacts can make a compile warm); the GPU check
is in docs/validation.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.env.compile_cache import CACHE_ENV, CACHE_OUT_ENV, load
from detaudit.standards.compile_cache import ship, standard_cache_dir

pytestmark = pytest.mark.recipe

COMPILE_RECIPE = REPO / "tests" / "recipes" / "compile_recipe.py"


def _compile_facts(workdir: Path) -> dict[str, object]:
    (found,) = workdir.rglob("compile.json")
    return json.loads(found.read_text())


@pytest.mark.slow
def test_record_ships_the_compile_artifacts_and_verify_loads_them_for_the_same_bits(tmp_path: Path) -> None:
    card = write_card(tmp_path / "compiled.toml", name="compiled", recipe=COMPILE_RECIPE, timeout_s=600,
                      extra='metrics_env = "DETAUDIT_METRICS_JSONL"\n[env]\nTORCHINDUCTOR_CACHE_DIR = "{workdir}/inductor"\n')
    recorded = run_cli("record", str(card), "--runs", "2", "--json", "--workdir", str(tmp_path / "rec"))
    assert recorded.code == 0, recorded.out + recorded.err
    doc = json.loads(recorded.out)
    standard = Path(doc["standard"])
    shipped = standard_cache_dir(standard)
    assert doc["compile_cache"] == str(shipped)
    assert sorted(p.name for p in shipped.iterdir()) == ["toy.bin", "toy.json"]
    manifest = json.loads((shipped / "toy.json").read_text())
    assert manifest["device"] == "cpu" and manifest["artifacts"] > 0
    assert _compile_facts(tmp_path / "rec" / "run1")["status"] == "off"  # a record never loads old artifacts

    # A fresh machine: an empty Inductor cache dir, the shipped artifacts loaded; the same bits (PASSED).
    warm = run_cli("verify", str(card), "--json", "--workdir", str(tmp_path / "ver"))
    assert warm.code == 0, warm.out + warm.err
    assert json.loads(warm.out)["compile_cache"] == str(shipped)
    facts = _compile_facts(tmp_path / "ver")
    assert facts["status"] == "loaded" and facts["hits"] >= 1 and facts["misses"] == 0, facts

    # Artifacts of another torch are never trusted: not loaded, compiled from scratch, still PASSED.
    manifest["torch"] = "0.0.0-elsewhere"
    (shipped / "toy.json").write_text(json.dumps(manifest))
    cold = run_cli("verify", str(card), "--workdir", str(tmp_path / "cold"))
    assert cold.code == 0, cold.out + cold.err
    facts = _compile_facts(tmp_path / "cold")
    assert facts["status"] == "other-build" and facts["misses"] >= 1, facts
    assert "made elsewhere (torch 0.0.0-elsewhere there" in (tmp_path / "cold" / "run1" / "run.log").read_text()


BLOCKS_SCRIPT = r"""
import hashlib, json, sys
import torch, torch._dynamo.utils
from detaudit.env import compile_cache
from recipes.diffusion_nft.config import parse_args
from recipes.diffusion_nft.lora import add_lora
from recipes.diffusion_nft.models import build_transformer, compile_blocks

torch.use_deterministic_algorithms(True)  # as determinism.enable does in every actor
status = compile_cache.load("blocks")
model = build_transformer("tiny", 0)
add_lora(model, parse_args(["--preset", "tiny", "--device", "cpu"]).model)
model.eval().requires_grad_(False)
gen = torch.Generator().manual_seed(0)
x = dict(hidden_states=torch.randn(2, 4, 16, 16, generator=gen), encoder_hidden_states=torch.randn(2, 7, 64, generator=gen),
         pooled_projections=torch.randn(2, 64, generator=gen), timestep=torch.tensor([250.0, 750.0]), return_dict=False)
compile_blocks(model, True)
with torch.no_grad():
    out = model(**x)[0]
compile_cache.save("blocks")
counters = torch._dynamo.utils.counters["inductor"]
print(json.dumps({"status": status, "bits": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
                  "hits": counters["fxgraph_cache_hit"], "misses": counters["fxgraph_cache_miss"]}))
"""


def _blocks(tmp_path: Path, inductor: str, **env: str) -> dict[str, object]:
    full = {**{k: v for k, v in __import__("os").environ.items() if not k.startswith("DETAUDIT_")},
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / inductor), "PYTHONPATH": str(REPO), **env}
    proc = subprocess.run([sys.executable, "-c", BLOCKS_SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_recipes_compiled_blocks_give_the_same_bits_with_and_without_the_shipped_cache(tmp_path: Path) -> None:
    """The tiny transformer's compiled blocks, as the engine and trainer compile them: built from
    scratch in one fresh process, from the other's artifacts in another (no compile)."""
    artifacts = tmp_path / "artifacts"
    built = _blocks(tmp_path, "inductor-a", **{CACHE_OUT_ENV: str(artifacts)})
    assert built["status"] == "off" and built["misses"] >= 1 and built["hits"] == 0
    loaded = _blocks(tmp_path, "inductor-b", **{CACHE_ENV: str(artifacts)})
    assert loaded["status"] == "loaded" and loaded["misses"] == 0 and loaded["hits"] == built["misses"]
    assert loaded["bits"] == built["bits"]


def test_artifacts_that_do_not_fit_this_process_are_never_loaded(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing, from another build, or not what the manifest says: not loaded (compiled from scratch)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert load("engine") == "missing"
    import torch

    data = b"not torch's artifacts"
    manifest = {"torch": torch.__version__, "cuda": str(torch.version.cuda or ""), "triton": "", "device": "cpu",
                "sha256": __import__("hashlib").sha256(data).hexdigest()}
    (tmp_path / "engine.bin").write_bytes(data)
    (tmp_path / "engine.json").write_text(json.dumps({**manifest, "torch": "1.0"}))
    assert load("engine") == "other-build"
    (tmp_path / "engine.json").write_text(json.dumps({**manifest, "sha256": "0" * 64}))
    assert load("engine") == "corrupt"
    (tmp_path / "engine.json").write_text(json.dumps(manifest))
    assert load("engine") == "unreadable"  # torch refuses the bytes: nothing loaded
    with pytest.raises(ValueError):
        load("../engine")
    monkeypatch.delenv(CACHE_ENV)
    assert load("engine") == "off"


def test_shipping_replaces_the_old_artifacts_and_removes_them_when_a_run_compiled_nothing(tmp_path: Path) -> None:
    standard = tmp_path / "card.cpu-test.json"
    run = tmp_path / "run1"
    (run / "compile-cache").mkdir(parents=True)
    (run / "compile-cache" / "train0.bin").write_bytes(b"new")
    (run / "compile-cache" / "train0.json").write_text("{}")
    (run / "compile-cache" / ".train0.bin.1.tmp").write_bytes(b"half written")
    old = standard_cache_dir(standard)
    old.mkdir()
    (old / "engine0.bin").write_bytes(b"old")
    assert ship(run, standard) == old
    assert sorted(p.name for p in old.iterdir()) == ["train0.bin", "train0.json"]
    assert (old / "train0.bin").read_bytes() == b"new"
    assert ship(tmp_path / "run2", standard) is None and not old.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
