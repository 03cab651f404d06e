"""Flow-GRPO: the math against hand computation, the SDE sampler, and the seeding proof on Ray."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from conftest import REPO, SuiteVerification, run_cli

from recipes.diffusion_nft.algorithms import flow_grpo

pytestmark = pytest.mark.recipe
CARD = REPO / "recipes" / "sd3_compress_flow_grpo.toml"
GPU_CARD = REPO / "recipes" / "sd3_compress_flow_grpo_gpu.toml"
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def test_sde_step_mean_scale_and_log_prob_by_hand() -> None:
    # sigma 0.5 -> 0.25, a = 0.5: std = 0.5 sqrt(0.5/0.5) = 0.5, dt = -0.25, scale = 0.5 * 0.5 = 0.25
    # mean = x (1 + 0.25/(2*0.5) * -0.25) + v (1 + 0.25*0.5/(2*0.5)) * -0.25 = 0.9375 x - 0.28125 v
    x = torch.tensor([[1.0, 2.0]])
    v = torch.tensor([[0.5, -1.0]])
    x_next = torch.tensor([[1.0, 2.0]])
    step = flow_grpo.sde_step(v, x, 0.5, 0.25, noise_level=0.5, sigma_max=0.9, next_sample=x_next)
    assert step.mean.tolist() == [[0.796875, 2.15625]]
    assert step.scale.item() == 0.25
    residuals = (1.0 - 0.796875, 2.0 - 2.15625)
    expected = sum(-(r * r) / (2 * 0.0625) - math.log(0.25) - LOG_SQRT_2PI for r in residuals) / 2
    assert step.log_prob.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.2046605154, rel=1e-8)
    # The same number from torch's own Gaussian.
    normal = torch.distributions.Normal(step.mean, step.scale)
    assert step.log_prob.item() == pytest.approx(normal.log_prob(x_next).mean().item(), rel=1e-6)


def test_sde_step_sampling_with_given_noise_and_sigma_one() -> None:
    x = torch.tensor([[0.5, -0.5, 1.0]])
    v = torch.tensor([[1.0, 1.0, -2.0]])
    eps = torch.tensor([[1.0, -2.0, 0.5]])
    # sigma = 1 divides by 1 - sigma_max: std = 0.7 * sqrt(1 / (1 - 0.96)) = 3.5
    step = flow_grpo.sde_step(v, x, 1.0, 0.96, noise_level=0.7, sigma_max=0.96, noise=eps)
    std = 0.7 * math.sqrt(1 / 0.04)
    assert flow_grpo.sde_std(torch.tensor(1.0), 0.96, 0.7).item() == pytest.approx(std)
    dt = 0.96 - 1.0
    mean = [xi * (1 + std**2 / 2 * dt) + vi * dt for xi, vi in zip([0.5, -0.5, 1.0], [1.0, 1.0, -2.0])]
    scale = std * math.sqrt(-dt)
    assert step.mean[0].tolist() == pytest.approx(mean, rel=1e-5)
    assert step.next_sample[0].tolist() == pytest.approx([m + scale * e for m, e in zip(mean, [1.0, -2.0, 0.5])],
                                                         rel=1e-5)
    # The log-prob of the sampled point is the standard normal density of eps, shifted by -log(scale).
    expected = sum(-e * e / 2 for e in (1.0, -2.0, 0.5)) / 3 - math.log(scale) - LOG_SQRT_2PI
    assert step.log_prob.item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError):
        flow_grpo.sde_step(v, x, 1.0, 0.96, noise_level=0.7, sigma_max=0.96)


def test_group_advantages_by_hand() -> None:
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0])
    adv = flow_grpo.group_advantages(rewards, 4)
    std = math.sqrt(1.25)  # population std of 1, 2, 3, 4
    assert adv.dtype == torch.float64
    assert adv.tolist() == pytest.approx([c / (std + 1e-4) for c in (-1.5, -0.5, 0.5, 1.5)] + [0.0] * 4, rel=1e-12)
    # Each group is normalised by its own std (unlike the NFT advantages' global std).
    wide = flow_grpo.group_advantages(torch.tensor([0.0, 100.0, 5.0, 6.0]), 2)
    assert wide.tolist() == pytest.approx([-1 / (1 + 2e-6), 1 / (1 + 2e-6), -1 / (1 + 2e-4), 1 / (1 + 2e-4)])


def test_clipped_objective_value_and_gradient_by_hand() -> None:
    ratios = torch.tensor([1.5, 0.5, 1.5, 1.1], dtype=torch.float64)
    log_prob = ratios.log().requires_grad_(True)
    old = torch.zeros(4, dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0, -2.0, 1.0], dtype=torch.float64)
    loss, ratio = flow_grpo.clipped_objective(log_prob, old, adv, clip_range=0.2)
    # per sample max(-A r, -A clip(r, 0.8, 1.2)):
    #   r 1.5, A 1:  max(-1.5, -1.2) = -1.2  (clipped: no gradient)
    #   r 0.5, A 1:  max(-0.5, -0.8) = -0.5  (unclipped: d/dlogp = -A r = -0.5)
    #   r 1.5, A -2: max(3.0, 2.4)  = 3.0   (unclipped, pessimistic: d/dlogp = 3.0)
    #   r 1.1, A 1:  -1.1 both              (inside the range: d/dlogp = -1.1)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 3.0 - 1.1) / 4, rel=1e-12)
    assert ratio.tolist() == pytest.approx([1.5, 0.5, 1.5, 1.1], rel=1e-12)
    loss.backward()
    assert log_prob.grad.tolist() == pytest.approx([0.0, -0.5 / 4, 3.0 / 4, -1.1 / 4], rel=1e-12)
    # Advantages are clipped to +-5 first.
    big, _ = flow_grpo.clipped_objective(torch.zeros(1), torch.zeros(1), torch.tensor([50.0]), clip_range=0.2)
    assert big.item() == -5.0


def test_grpo_loss_ratio_one_kl_and_gradient_by_hand() -> None:
    # One sample, 2 elements; sigma 0.5 -> 0.25, a = 0.5 (mean = 0.9375 x - 0.28125 v, scale 0.25).
    x = torch.tensor([[1.0, 2.0]])
    v_old = torch.tensor([[0.5, -1.0]])
    x_next = torch.tensor([[1.0, 2.0]])
    old = flow_grpo.sde_step(v_old, x, 0.5, 0.25, 0.5, 0.9, next_sample=x_next).log_prob
    v = v_old.clone().requires_grad_(True)
    v_ref = torch.tensor([[0.0, 0.0]])
    out = flow_grpo.grpo_loss(v, v_ref, x, x_next, 0.5, 0.25, old, torch.tensor([2.0]), noise_level=0.5,
                              sigma_max=0.9, clip_range=1e-4, kl_weight=0.1)
    # Same policy as the sampler: ratio exactly 1, nothing clipped, no drift.
    assert out.ratio.tolist() == [1.0] and out.clip_frac.item() == 0.0 and out.approx_kl.item() == 0.0
    assert out.policy_loss.item() == -2.0
    # KL: mean - mean_ref = -0.28125 * (v - v_ref) = [-0.140625, 0.28125]; squared / (2 * 0.25^2), averaged.
    kl = (0.140625**2 + 0.28125**2) / (2 * 0.0625) / 2
    assert out.kl.item() == pytest.approx(kl, rel=1e-6)
    assert out.loss.item() == pytest.approx(-2.0 + 0.1 * kl, rel=1e-6)
    out.loss.backward()
    # d policy / dv = -A * ratio * dlogp/dmean * dmean/dv, dlogp/dmean = (x_next - mean) / scale^2 / 2 elements,
    # dmean/dv = -0.28125; d kl / dv = (mean - mean_ref) / scale^2 / 2 * -0.28125.
    residual = [1.0 - 0.796875, 2.0 - 2.15625]
    gap = [-0.140625, 0.28125]
    grad = [-2.0 * r / 0.0625 / 2 * -0.28125 + 0.1 * g / 0.0625 / 2 * -0.28125 for r, g in zip(residual, gap)]
    assert v.grad[0].tolist() == pytest.approx(grad, rel=1e-5)


def test_num_train_timesteps() -> None:
    assert flow_grpo.num_train_timesteps(10, 0.99) == 9
    assert flow_grpo.num_train_timesteps(10, 0.5) == 5
    assert flow_grpo.num_train_timesteps(10, 0.01) == 1


@pytest.mark.slow
def test_sde_sampler_log_probs_rescore_exactly_and_make_no_global_draw() -> None:
    """The trajectory's log-probs equal a re-scoring of its transitions; chunking does not change a
    sample's noise; the global torch RNG is untouched (all noise comes from per-sample generators)."""
    from recipes.diffusion_nft.models import build_pipeline
    from recipes.diffusion_nft.sampling import sampler_sigmas

    pipe = build_pipeline("tiny", 0)
    sigmas = sampler_sigmas(pipe.scheduler, 4)
    embeds, _, pooled, _ = pipe.encode_prompt(["a red fox", "a cat"], None, None, do_classifier_free_guidance=False,
                                              max_sequence_length=77)
    embeds, pooled = embeds.repeat_interleave(2, dim=0), pooled.repeat_interleave(2, dim=0)
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]
    noise = torch.stack([torch.full((4, 16, 16), float(i)) for i in range(4)])
    cpu = torch.device("cpu")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    whole = flow_grpo.sample_sde(pipe.transformer, pipe.vae, embeds, pooled, noise, sigmas,
                                 flow_grpo.sample_generators(7, pairs), 0.7, torch.float32, cpu)
    assert torch.equal(torch.get_rng_state(), state)
    gens = flow_grpo.sample_generators(7, pairs)
    parts = [flow_grpo.sample_sde(pipe.transformer, pipe.vae, embeds[i:i + 2], pooled[i:i + 2], noise[i:i + 2],
                                  sigmas, gens[i:i + 2], 0.7, torch.float32, cpu) for i in (0, 2)]
    # Same noise per sample whatever the chunking: only kernel rounding (batch size 4 vs 2) differs,
    # where another sample's noise would differ by O(1).
    torch.testing.assert_close(whole.latents, torch.cat([p.latents for p in parts]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(whole.log_probs, torch.cat([p.log_probs for p in parts]), rtol=1e-4, atol=1e-4)
    assert whole.latents.shape == (4, 5, 4, 16, 16) and whole.log_probs.shape == (4, 4)
    assert whole.images.shape == (4, 3, 32, 32) and whole.images.dtype == torch.uint8
    assert torch.equal(whole.latents[:, 0], noise)
    # Re-scoring each recorded transition with the same model gives the recorded log-prob.
    with torch.no_grad():
        for j in range(4):
            v = pipe.transformer(hidden_states=whole.latents[:, j], encoder_hidden_states=embeds,
                                 pooled_projections=pooled, timestep=sigmas[j].expand(4) * 1000, return_dict=False)[0]
            step = flow_grpo.sde_step(v, whole.latents[:, j], sigmas[j], sigmas[j + 1], 0.7, float(sigmas[1]),
                                      next_sample=whole.latents[:, j + 1])
            assert torch.equal(step.log_prob, whole.log_probs[:, j])
    # Another seed, another trajectory; every sample its own noise.
    other = flow_grpo.sample_sde(pipe.transformer, pipe.vae, embeds, pooled, noise, sigmas,
                                 flow_grpo.sample_generators(8, pairs), 0.7, torch.float32, cpu)
    assert not torch.equal(other.latents[:, 1:], whole.latents[:, 1:])


def _card_argv(card: Path) -> list[str]:
    command = tomllib.loads(card.read_text())["command"]
    return [sys.executable if part == "{python}" else part for part in command]


def test_gpu_card_mirrors_the_nft_gpu_card() -> None:
    from recipes.diffusion_nft.config import parse_args

    gpu = tomllib.loads(GPU_CARD.read_text())
    nft_gpu = tomllib.loads((REPO / "recipes" / "sd3_pickscore_nft_gpu.toml").read_text())
    assert gpu["suite"] == nft_gpu["suite"] == "gpu" and gpu["gpus_per_run"] == nft_gpu["gpus_per_run"] == 1
    args = parse_args(_card_argv(GPU_CARD)[3:])
    nft_args = parse_args(_card_argv(REPO / "recipes" / "sd3_pickscore_nft_gpu.toml")[3:])
    assert args.job.algorithm == "flow-grpo" and nft_args.job.algorithm == "nft"
    # Every shared section alike (the compile flag aside: the NFT card compiles its blocks).
    for section in ("model", "rollout", "placement", "ray"):
        assert getattr(args, section) == getattr(nft_args, section), section
    assert args.determinism == nft_args.determinism and args.job.rollouts == nft_args.job.rollouts
    same = ("precision", "micro_batch", "lr", "grad_clip", "weight_decay")
    assert all(getattr(args.training, k) == getattr(nft_args.training, k) for k in same)
    assert args.training.precision == "bf16" and args.algorithm_settings.kl_weight == 0.04
    assert nft_args.algorithm_settings.kl_weight == 1e-4
    cpu = parse_args(_card_argv(CARD)[3:])
    assert (cpu.job.algorithm, cpu.training.precision, cpu.reward.kind) == ("flow-grpo", "fp32", "compressibility")


@pytest.mark.slow
@pytest.mark.ray
def test_unseeded_rollout_manager_leaves_every_flow_grpo_series_bit_identical(
        tmp_path: Path, cpu_suite_verification: SuiteVerification) -> None:
    """The proof of issue 14, on the CPU card's standard, never a silent skip.

    The card run with every actor seeded (through `detaudit verify`) and with the RolloutManager's
    global RNG unseeded (`--no-seed-rollout-manager`): all Flow-GRPO series identical, and both
    pass the same standard: the committed one for this runner class, else (as for the NFT card in
    tests/test_pipeline.py) one recorded here from 3 agreeing runs, after checking that `verify`
    does not pass against another class's standard. The NFT counterpart, where the same flag
    breaks the standard, is tests/test_pipeline.py::test_standard_holds_on_this_machine_and_unseeded_manager_refuses.
    Where the standard is committed, the seeded run is the Flow-GRPO card's run of the session's
    `verify --suite cpu` (conftest.cpu_suite_verification).
    """
    env = run_cli("env", "--json", str(CARD), cwd=REPO)
    assert env.code == 0, env.text
    here = json.loads(env.out)["runner_class"]
    committed = REPO / "standards" / f"{CARD.stem}.{'-'.join(here)}.json"
    unseeded = tmp_path / "unseeded.jsonl"
    proc = subprocess.Popen([*_card_argv(CARD), "--no-seed-rollout-manager", "--metrics-jsonl", str(unseeded)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if committed.exists():
            standard = committed
            suite = cpu_suite_verification
            row = suite.row(CARD.stem)
            assert "PASSED" in row and "20 series match" in row, suite.result.text
            verify_dir = suite.runs / CARD.stem
        else:
            standard = tmp_path / "standard.json"
            record = run_cli("record", str(CARD), "--runs", "3", "--no-doctor", "--parallel", "2", "--out", str(standard),
                             "--workdir", str(tmp_path / "record"), cwd=REPO)
            assert record.code == 0, record.text
            verify = run_cli("verify", str(CARD), "--standard", str(standard), "--workdir", str(tmp_path / "verify"),
                             cwd=REPO)
            assert verify.code == 0 and "PASSED: 20 metric series match" in verify.out, verify.text
            verify_dir = tmp_path / "verify"
    finally:
        err = proc.communicate(timeout=1200)[1]
    assert proc.returncode == 0, err[-3000:]
    if not committed.exists():
        refused = run_cli("verify", str(CARD), "--metrics", str(unseeded), cwd=REPO)
        assert refused.code != 0, refused.text  # nothing passes against another class's standard, or none
    (seeded,) = sorted(verify_dir.rglob("metrics.jsonl"))
    lines = [json.loads(line) for line in seeded.read_text().splitlines()]
    train = [line for line in lines if line["step_key"] == "train/step"]
    assert len(train) == 6 and all(math.isfinite(line["train/grad_norm"]) for line in train)
    # On-policy: each rollout is sampled with the weights its first step starts from, so that step's
    # log-probs differ from the engine's by numerics only; the second step trains a policy that has
    # moved, and drift, clipping and approx-KL show.
    drift = [line["train/logprob_drift_max"] for line in train]
    assert all(d < 1e-5 for d in drift[0::2]) and all(d > 1e-5 for d in drift[1::2]), drift
    assert all(line["train/clip_frac"] > 0 and line["train/approx_kl"] > 0 for line in train[1::2])
    assert all(line["train/kl"] > 0 for line in train[1:])
    same = run_cli("diff", str(seeded), str(unseeded), cwd=REPO)
    assert same.code == 0, same.text
    assert "20 / 20 identical" in same.out, same.out
    passed = run_cli("verify", str(CARD), "--metrics", str(unseeded), "--standard", str(standard), cwd=REPO)
    assert passed.code == 0 and "PASSED: 20 metric series match" in passed.out, passed.text


def test_only_nft_draws_when_converting_a_rollout() -> None:
    """The RolloutManager's conversion: NFT shuffles its timesteps on the global RNG, Flow-GRPO draws nothing."""
    from recipes.diffusion_nft.algorithms import nft
    from recipes.diffusion_nft.config import parse_args

    config = parse_args(["--group-size", "4", "--steps", "10"])
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 0.0])
    sigmas = torch.linspace(1.0, 0.0, 11)
    state = torch.get_rng_state()
    pairs = flow_grpo.train_data(rewards, sigmas, config)
    assert torch.equal(torch.get_rng_state(), state)
    assert set(pairs) == {"adv", "sigmas"} and pairs["sigmas"].shape == (8, 11)
    assert torch.equal(pairs["adv"], flow_grpo.group_advantages(rewards, 4))
    nft_pairs = nft.train_data(rewards, sigmas, config)
    assert not torch.equal(torch.get_rng_state(), state)
    assert set(nft_pairs) == {"adv", "r", "train_t"} and nft_pairs["train_t"].shape == (8, 9)


@pytest.mark.slow
@pytest.mark.ray
def test_verify_suite_cpu_passes_on_both_recipes(cpu_suite_verification: SuiteVerification) -> None:
    """`detaudit verify --suite cpu` (issue 14): the NFT and the Flow-GRPO card both pass their standards.

    On a runner class with no committed standard for a card, that card is NOT VERIFIED and the suite
    fails (exit 1): checked here too, so this test never passes by skipping. The suite ran beside
    someone else's Ray head with RAY_ADDRESS naming it (conftest.cpu_suite_verification): no run joined it.
    """
    env = run_cli("env", "--json", str(CARD), cwd=REPO)
    assert env.code == 0, env.text
    here = "-".join(json.loads(env.out)["runner_class"])
    cards = sorted(path.stem for path in (REPO / "recipes").glob("*.toml")
                   if tomllib.loads(path.read_text()).get("suite") == "cpu")
    assert cards == ["sd3_compress_flow_grpo", "sd3_pickscore_nft"]
    result = cpu_suite_verification.result
    assert cpu_suite_verification.head_drivers == []
    missing = [card for card in cards if not (REPO / "standards" / f"{card}.{here}.json").exists()]
    if missing:
        assert result.code == 1 and "NOT VERIFIED" in result.text, result.text
        assert f"{len(cards) - len(missing)} of 2 cards passed" in result.text, result.text
    else:
        assert result.code == 0, result.text
        assert "suite cpu: 2 of 2 cards passed" in result.out, result.text
        assert result.out.count("20 series match") == 2, result.out
        # --workdir: each card's run kept under its file's stem
        assert sorted(p.parent.parent.name for p in cpu_suite_verification.runs.glob("*/run1/metrics.jsonl")) == cards
