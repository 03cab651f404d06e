"""The sglang engine adapter (``--engine sglang``) against a fake sglang server: a real process that
speaks sglang's HTTP protocol (``tests/fake_sglang_server.py``), so CI covers the adapter's request
building, seeds per sample and LoRA pushes without sglang installed. The real server is exercised
by the sglang card (``recipes/sd3_pickscore_nft_sglang.toml``, its own environment)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from recipes.diffusion_nft import seeds
from recipes.diffusion_nft.config import parse_args
from recipes.diffusion_nft.sglang_client import (
    EngineError,
    SampleSpec,
    SGLangClient,
    lora_push_request,
    rollout_request,
)

pytestmark = pytest.mark.recipe
FAKE = Path(__file__).with_name("fake_sglang_server.py")
REPO = Path(__file__).resolve().parents[1]


def tiny_config(*flags: str):
    return parse_args(["--preset", "tiny", "--engine", "sglang", *flags]).replace("placement", device="cpu")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from recipes.diffusion_nft.models import build_pipeline

    path = tmp_path_factory.mktemp("sglang-model") / "model"
    build_pipeline("tiny", 0).save_pretrained(path)
    return path


def free_port() -> int:
    from recipes.diffusion_nft.ports import free_port as port

    return port()


@pytest.fixture(scope="module")
def server(model_dir):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE), "--model-path", str(model_dir), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)
    client = SGLangClient(f"http://127.0.0.1:{port}", timeout_s=60)
    client.wait_healthy(lambda: proc.poll() is None, 120)
    yield client
    proc.terminate()
    proc.wait(timeout=30)


def fake_log(client: SGLangClient) -> dict:
    with urllib.request.urlopen(client.base_url + "/fake/log", timeout=30) as response:
        return json.loads(response.read())


def lora_state(seed: int = 0, zero_b: bool = False) -> dict[str, torch.Tensor]:
    """A LoRA state as the trainer sends it: the tiny transformer's adapter, names and shapes."""
    from recipes.diffusion_nft.config import ModelSettings
    from recipes.diffusion_nft.lora import add_lora, lora_parameters
    from recipes.diffusion_nft.models import build_transformer

    transformer = build_transformer("tiny", 0)
    add_lora(transformer, ModelSettings())
    gen = torch.Generator().manual_seed(seed)
    return {n: (torch.zeros_like(p) if zero_b else torch.randn(p.shape, generator=gen) * 0.05)
            if "lora_B" in n else p.detach().clone() for n, p in lora_parameters(transformer)}


# --- request building (no server) ---------------------------------------------------------------


def test_each_sample_is_a_request_with_its_own_seed():
    from recipes.diffusion_nft.actors.sglang_engine import sample_specs

    config = tiny_config("--group-size", "3", "--steps", "5", "--resolution", "32")
    specs = sample_specs(config, 2, [(4, "a cat"), (9, "a dog")], rollout_seed=77)
    assert [s.prompt for s in specs] == ["a cat"] * 3 + ["a dog"] * 3
    assert [s.seed for s in specs] == [seeds.initial_noise(77, p, s) for p in (4, 9) for s in range(3)]
    assert len({s.seed for s in specs}) == 6
    # sglang sizes latents as pixels / 8: the tiny VAE compresses 2x, so 32 px of the recipe ask for 128
    assert {s.resolution for s in specs} == {128} and {s.steps for s in specs} == {5}
    assert not any(s.sde for s in specs)  # NFT: the ODE sampler
    grpo = sample_specs(tiny_config("--algorithm", "flow-grpo", "--noise-level", "0.5"), 8, [(0, "x")], 1)
    assert all(s.sde and s.noise_level == 0.5 and s.resolution == 32 for s in grpo)


def test_rollout_request_is_sglangs_with_no_guidance_and_a_cpu_generator():
    body = rollout_request(SampleSpec("a cat", 123, 10, 64, sde=False, noise_level=0.7))
    assert body["seed"] == 123 and body["num_outputs_per_prompt"] == 1 and body["generator_device"] == "cpu"
    assert body["guidance_scale"] == 1.0 and body["rollout"] is True
    assert (body["rollout_sde_type"], body["rollout_log_prob_no_const"]) == ("ode", True)
    assert body["rollout_return_dit_trajectory"] and body["rollout_return_denoising_env"]
    sde = rollout_request(SampleSpec("a cat", 123, 10, 64, sde=True, noise_level=0.7))
    assert (sde["rollout_sde_type"], sde["rollout_log_prob_no_const"]) == ("sde", False)


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_lora_push_is_the_same_bytes_for_the_same_state():
    state = lora_state()
    first, again = lora_push_request(state, 64, 32), lora_push_request(dict(reversed(state.items())), 64, 32)
    assert first == again  # name order, by value: no dependence on dict order or shared memory
    assert (first["weight_update_mode"], first["target_modules"], first["lora_alpha"], first["lora_rank"]) == \
        ("lora_merge", ["transformer"], 64, 32)


def test_compile_blocks_is_refused_with_the_sglang_engine(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--engine", "sglang", "--compile-blocks"])
    assert exc.value.code == 2 and "--compile-blocks" in capsys.readouterr().err


def test_the_cpu_empty_cache_shim_is_applied_only_where_the_bug_is():
    from recipes.diffusion_nft.sglang_server import SHIMS, apply_shims, has_cpu_empty_cache_bug

    buggy = "if torch.get_device_module().is_available():\n    torch.get_device_module().empty_cache()\n"
    assert has_cpu_empty_cache_bug(buggy, cpu_has_empty_cache=False)
    assert not has_cpu_empty_cache_bug(buggy, cpu_has_empty_cache=True)  # a torch whose CPU module has it
    assert not has_cpu_empty_cache_bug("current_platform.empty_cache()\n", cpu_has_empty_cache=False)  # sglang 0.5.23
    assert not has_cpu_empty_cache_bug(None, cpu_has_empty_cache=False)  # no such module installed
    present, _ = SHIMS["cpu_empty_cache"]
    assert not present() and apply_shims() == []  # no sglang here: nothing to patch
    assert not hasattr(torch.cpu, "empty_cache") or torch.cpu.empty_cache.__module__ == "torch.cpu"


# --- against the fake server (slow: a server process, torch imported in it) ---------------------


@pytest.mark.slow
def test_generate_sends_the_samples_seed_and_gets_its_noise_back(server):
    spec = SampleSpec("a cat", seeds.initial_noise(5, 1, 2), steps=4, resolution=128, sde=False, noise_level=0.7)
    sample = server.generate(spec)
    assert fake_log(server)["generate"][-1] == rollout_request(spec)
    latents = sample["dit_trajectory"]["latents"]
    assert latents.shape == (5, 4, 16, 16)
    expected = torch.randn((4, 16, 16), generator=torch.Generator().manual_seed(spec.seed))
    assert torch.equal(latents[0], expected)  # the seed on the wire is the sample's own
    assert torch.equal(server.generate(spec)["generated_output"], sample["generated_output"])


@pytest.mark.slow
def test_lora_push_arrives_whole_and_changes_the_samples(server):
    spec = SampleSpec("a cat", 11, steps=4, resolution=128, sde=True, noise_level=0.7)
    base = server.generate(spec)["generated_output"]
    state = lora_state(seed=1)
    assert "Updated 19 LoRA layers" in server.push_lora(state, 64, 32)
    push = fake_log(server)["push"][-1]
    assert push["names"] == sorted(state) and (push["alpha"], push["rank"]) == (64, 32)
    assert push["digests"] == [hashlib.sha256(state[n].numpy().tobytes()).hexdigest() for n in sorted(state)]
    assert not torch.equal(server.generate(spec)["generated_output"], base)
    server.push_lora(lora_state(zero_b=True), 64, 32)  # B = 0: the base model again
    assert torch.equal(server.generate(spec)["generated_output"], base)


@pytest.mark.slow
def test_a_refused_push_fails_with_the_servers_message(server):
    state = {n: t for n, t in lora_state().items() if "lora_B" not in n}
    with pytest.raises(EngineError, match="No LoRA A/B tensor pairs"):
        server.push_lora(state, 64, 32)


@pytest.mark.slow
def test_a_server_that_exits_before_it_is_healthy_fails_at_once(tmp_path):
    proc = subprocess.Popen([sys.executable, str(FAKE), "--model-path", str(tmp_path), "--port", str(free_port())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    with pytest.raises(EngineError, match="exited before it was healthy"):
        SGLangClient("http://127.0.0.1:9").wait_healthy(lambda: proc.poll() is None, 120)
    assert time.monotonic() - started < 60


# --- the engine actor, on the fake (slow: builds and saves the tiny pipeline) ---------------------


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["nft", "flow-grpo"])
def test_the_engine_actor_hands_the_manager_what_the_builtin_engine_does(tmp_path, monkeypatch, algorithm):
    from recipes.diffusion_nft.actors.sglang_engine import SGLangRolloutEngine, sample_specs, to_uint8

    monkeypatch.setenv("DETAUDIT_WORKDIR", str(tmp_path))
    config = tiny_config("--algorithm", algorithm, "--steps", "3")
    engine = SGLangRolloutEngine(config, 0, launcher=[sys.executable, str(FAKE)])
    try:
        out = engine.generate([(0, "a cat"), (5, "a dog")], rollout_seed=3)
        n, group = 2 * config.rollout.group_size, config.rollout.group_size
        assert out["images"].shape == (n, 3, 32, 32) and out["images"].dtype == torch.uint8
        assert out["prompt_embeds"].shape[0] == 2 and out["pooled"].shape == (2, 64)
        assert out["prompts"] == ["a cat"] * group + ["a dog"] * group and out["sigmas"].shape == (4,)
        specs = sample_specs(config, 2, [(0, "a cat"), (5, "a dog")], 3)
        again = engine.client.generate(specs[-1])  # the last sample, asked for again: what the actor got
        assert torch.equal(out["images"][-1], to_uint8(again["generated_output"]))
        assert torch.equal(out["prompt_embeds"][1], again["denoising_env"]["pos_cond_kwargs"]["encoder_hidden_states"])
        if algorithm == "nft":
            assert out["x0"].shape == (n, 4, 16, 16) and "latents" not in out
            assert torch.equal(out["x0"][-1], again["dit_trajectory"]["latents"][-1])  # the final latent
        else:
            assert out["latents"].shape == (n, 4, 4, 16, 16) and out["log_probs"].shape == (n, 3)
            first = torch.randn((4, 16, 16), generator=torch.Generator().manual_seed(seeds.initial_noise(3, 5, 1)))
            assert torch.equal(out["latents"][group + 1, 0], first)  # (prompt 5, sample 1)'s own noise
        log = fake_log(engine.client)
        assert [b["seed"] for b in log["generate"]] == \
            [seeds.initial_noise(3, p, s) for p in (0, 5) for s in range(group)] + [specs[-1].seed]
        state = lora_state()
        assert engine.load_lora(state) == len(state)
        with pytest.raises(ValueError, match="does not match"):
            engine.load_lora({n: t for n, t in state.items() if "to_q" not in n})
        assert len(fake_log(engine.client)["push"]) == 1  # the refused state never left the actor
    finally:
        engine.shutdown()
    assert engine.server.poll() is not None
