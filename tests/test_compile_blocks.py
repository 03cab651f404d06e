"""compile_blocks: each SD3 transformer block compiled in place, as the 1-GPU card's actors run it.

Run in a fresh interpreter: compiling changes process-wide dynamo and Inductor settings. On the CPU
Inductor generates C++; the bits across processes and on the GPU are checked on H200 (docs/validation.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.recipe

SCRIPT = r"""
import json, sys
import torch
import torch._dynamo
import torch._inductor.config
from recipes.diffusion_nft.config import parse_args
from recipes.diffusion_nft.lora import adapters_disabled, add_lora
from recipes.diffusion_nft.models import COMPILED_GRAPHS_PER_BLOCK_CODE, build_transformer, compile_blocks

deterministic = sys.argv[1] == "1"
if sys.argv[2] == "1":
    torch.use_deterministic_algorithms(True)  # as determinism.enable does in every actor
model = build_transformer("tiny", 0)
add_lora(model, parse_args(["--preset", "tiny", "--device", "cpu"]).model)
model.eval().requires_grad_(False)
# LoRA B starts at zero: give the adapters weight so that adapters on and off differ.
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.copy_(torch.linspace(-0.05, 0.05, p.numel()).reshape(p.shape))
gen = torch.Generator().manual_seed(0)
# A rollout's shapes on the tiny card (8 samples, 154 text tokens): the graphs the recipe's engines
# compile, so that a cold Inductor cache builds these kernels once for the suite (docs/testing.md).
x = dict(hidden_states=torch.randn(8, 4, 16, 16, generator=gen), encoder_hidden_states=torch.randn(8, 154, 64, generator=gen),
         pooled_projections=torch.randn(8, 64, generator=gen), timestep=torch.linspace(100.0, 900.0, 8), return_dict=False)

def outputs():
    with torch.no_grad():
        on = model(**x)[0]
        with adapters_disabled(model):
            off = model(**x)[0]
    return on, off

names = list(model.state_dict())
eager_on, eager_off = outputs()
count = compile_blocks(model, deterministic)
if sys.argv[3] == "settings-only":  # no forward: nothing is compiled
    print(json.dumps({"inductor_deterministic": torch._inductor.config.deterministic}))
    sys.exit(0)
on, off = outputs()
on2, off2 = outputs()
limit = getattr(torch._dynamo.config, "recompile_limit", None) or torch._dynamo.config.cache_size_limit
print(json.dumps({
    "count": count, "blocks": len(model.transformer_blocks),
    "compiled": all(getattr(b, "_compiled_call_impl", None) is not None for b in model.transformer_blocks),
    "names_kept": list(model.state_dict()) == names,
    "inductor_deterministic": torch._inductor.config.deterministic,
    "limit": limit, "wanted_limit": COMPILED_GRAPHS_PER_BLOCK_CODE,
    "close_on": torch.allclose(on, eager_on, atol=1e-5, rtol=1e-4),
    "close_off": torch.allclose(off, eager_off, atol=1e-5, rtol=1e-4),
    "adapters_matter": not torch.allclose(on, off, atol=1e-4),
    "repeat_identical": torch.equal(on, on2) and torch.equal(off, off2),
}))
"""


def compiled(deterministic: bool, torch_switch: bool | None = None, run: bool = True) -> dict[str, object]:
    """The script's findings; ``torch_switch``: call torch.use_deterministic_algorithms(True) first
    (default: as ``deterministic``, as the actors do); ``run=False``: only the settings."""
    switch = deterministic if torch_switch is None else torch_switch
    argv = ["1" if deterministic else "0", "1" if switch else "0", "run" if run else "settings-only"]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_compiled_blocks_keep_their_names_and_compute_the_eager_function() -> None:
    r = compiled(deterministic=True)
    assert r["count"] == r["blocks"] == 2 and r["compiled"]
    # The trainer syncs LoRA weights to the engines by parameter name: compiling must not rename.
    assert r["names_kept"]
    # Under --deterministic-mode, Inductor must not pick kernels by timing them (numerics could differ between runs).
    assert r["inductor_deterministic"] is True
    # Past dynamo's default limit a block would silently run eagerly again.
    assert r["limit"] >= r["wanted_limit"] >= 16
    assert r["close_on"] and r["close_off"] and r["adapters_matter"] and r["repeat_identical"]


@pytest.mark.slow
def test_inductor_deterministic_mode_is_left_alone_without_deterministic_mode() -> None:
    r = compiled(deterministic=False)
    assert r["inductor_deterministic"] is False
    assert r["compiled"] and r["names_kept"] and r["close_on"] and r["close_off"]


@pytest.mark.slow
def test_deterministic_compile_sets_inductors_deterministic_mode_itself() -> None:
    # Newer torch sets it from use_deterministic_algorithms(True); compile_blocks must not rely on that.
    assert compiled(deterministic=True, torch_switch=False, run=False)["inductor_deterministic"] is True


ENGINE_SCRIPT = r"""
import json
import torch
import torch._dynamo.utils
from recipes.diffusion_nft.actors.engine import RolloutEngine, sample_batch_sizes
from recipes.diffusion_nft.config import parse_args

# 3 prompts x 4 samples in chunks of 8: the transformer runs at batch sizes 8 (a whole rollout of the
# tiny card, whose graphs the recipe's engines compile too) and 4.
args = parse_args(["--preset", "tiny", "--device", "cpu", "--compile-blocks", "--deterministic-mode",
                   "--prompts-per-rollout", "3", "--group-size", "4", "--sample-batch", "8", "--steps", "2"])
engine = RolloutEngine(args, 0)
prompts = [(0, "a red cube"), (1, "two cats"), (2, "a green hill")]
graphs = lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"]
eager = engine.generate(prompts, 7)
graphs_eager = graphs()
compile_s = engine.compile_transformer()
graphs_warm = graphs()
first = engine.generate(prompts, 7)
second = engine.generate(prompts, 7)
print(json.dumps({
    "batch_sizes": sample_batch_sizes(args, 0),
    "graphs_eager": graphs_eager, "graphs_warm": graphs_warm, "graphs_after": graphs(),
    "compile_s": compile_s, "again_s": engine.compile_transformer(),
    "compiled": all(getattr(b, "_compiled_call_impl", None) is not None for b in engine.pipe.transformer.transformer_blocks),
    "close_to_eager": torch.allclose(first["x0"], eager["x0"], atol=1e-4, rtol=1e-3),
    "repeat_identical": torch.equal(first["x0"], second["x0"]),
}))
"""


@pytest.mark.slow
def test_engine_samples_eagerly_until_compiled_then_never_compiles_again() -> None:
    # Rollout 0 runs eagerly (no compile before the first images); compile_transformer() must
    # build every graph generate() needs, or rollout 1 would compile on the critical path.
    proc = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["batch_sizes"] == [4, 8]
    assert r["graphs_eager"] == 0
    assert r["graphs_warm"] > 0 and r["compiled"] and r["compile_s"] > 0
    assert r["graphs_after"] == r["graphs_warm"], "generate() compiled a graph the warm-up missed"
    assert r["again_s"] == 0.0
    assert r["close_to_eager"] and r["repeat_identical"]


TRAINER_SCRIPT = r"""
import json, sys
import torch.distributed as dist
sys.path.insert(0, "tests")
from test_train_actor import rollout_batch
from recipes.diffusion_nft.actors.trainer import TrainActor
from recipes.diffusion_nft.config import parse_args
import tempfile
from recipes.diffusion_nft.ports import file_rendezvous
RENDEZVOUS = tempfile.TemporaryDirectory()  # removed at exit

def one_update(compile_blocks):
    # The trainer as the tiny card runs it (fp16, --deterministic-mode, a whole rollout of 2 prompts x 4
    # samples per step): the graphs the compiled-engine run at the end of this file compiles, built once.
    flags = ["--preset", "tiny", "--device", "cpu", "--deterministic-mode"]
    args = parse_args(flags + (["--compile-blocks"] if compile_blocks else []))
    actor = TrainActor(args, 0, 1, file_rendezvous(tempfile.mkdtemp(dir=RENDEZVOUS.name)))
    try:
        compiled = lambda: all(getattr(b, "_compiled_call_impl", None) is not None for b in actor.model.transformer_blocks)
        at_init = compiled()
        (metrics,) = actor.train(rollout_batch(group=4, text_tokens=154), 0)
        return at_init, compiled(), metrics["train/loss"]
    finally:
        dist.destroy_process_group()

eager = one_update(False)
compiled = one_update(True)
print(json.dumps({"eager": eager, "compiled": compiled}))
"""


@pytest.mark.slow
def test_trainer_compiles_its_blocks_at_the_first_train_call() -> None:
    # Not at start-up, where importing the compiler would delay the first rollout (docs/validation.md section 9).
    proc = subprocess.run([sys.executable, "-c", TRAINER_SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["eager"][:2] == [False, False]
    assert r["compiled"][:2] == [False, True]
    assert abs(r["compiled"][2] - r["eager"][2]) <= 1e-4 * abs(r["eager"][2])


def test_sample_batch_sizes_follow_the_managers_shards() -> None:
    from recipes.diffusion_nft.actors.engine import sample_batch_sizes
    from recipes.diffusion_nft.config import parse_args

    def sizes(flags: list[str], rank: int) -> list[int]:
        return sample_batch_sizes(parse_args(["--preset", "tiny", "--prompts-per-rollout", "3", "--group-size", "4",
                                              *flags]), rank)

    # one engine: 12 samples; in chunks of 5 -> 5, 5, 2
    assert sizes([], 0) == [12]
    assert sizes(["--sample-batch", "5"], 0) == [2, 5]
    # two engines: prompts 0, 2 and prompt 1 (the manager's chosen[i::engines])
    assert sizes(["--rollout-engines", "2"], 0) == [8]
    assert sizes(["--rollout-engines", "2"], 1) == [4]
    # more engines than prompts: engine 3 never samples, so it builds nothing
    assert sizes(["--rollout-engines", "4"], 3) == []


# In this file, not test_pipeline.py: the unit tests above compile the tiny card's shapes, so with a
# cold Inductor cache (a fresh clone) the tests of one worker build those kernels once, in order,
# instead of two workers building them at the same time (docs/testing.md).
@pytest.mark.slow
@pytest.mark.ray
def test_compiled_engines_build_their_kernels_after_rollout_0_and_only_if_another_follows(tmp_path: Path) -> None:
    """--compile-blocks: rollout 0 samples eagerly, the engines compile during its training, so
    only a run with a second rollout pays the compile (perf/engine_compile_time on loop 0)."""
    def loops(rollouts: int) -> list[dict]:
        metrics = tmp_path / f"r{rollouts}.jsonl"
        proc = subprocess.run([sys.executable, "-m", "recipes.diffusion_nft", "--preset", "tiny", "--device", "cpu",
                               "--deterministic-mode", "--compile-blocks", "--rollouts", str(rollouts),
                               "--metrics-jsonl", str(metrics)], cwd=REPO, capture_output=True, text=True,
                              timeout=900, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [json.loads(line) for line in metrics.read_text().splitlines() if '"perf/step"' in line]

    two = loops(2)
    assert [("perf/engine_compile_time" in loop) for loop in two] == [True, False]
    assert two[0]["perf/engine_compile_time"] > 0
    assert ["perf/engine_compile_time" in loop for loop in loops(1)] == [False]
