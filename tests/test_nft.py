"""DiffusionNFT math against hand-computed numbers."""

from __future__ import annotations

import pytest
import torch

from recipes.diffusion_nft.algorithms import nft

pytestmark = pytest.mark.recipe


def test_loss_matches_hand_computation() -> None:
    x0 = torch.tensor([[1.0, 2.0]])
    noise = torch.tensor([[0.5, -1.0]])
    t = torch.tensor([0.5])
    x_t = nft.forward_noise(x0, noise, t)
    assert x_t.tolist() == [[0.75, 0.5]]
    v_theta = torch.tensor([[1.0, 0.0]], requires_grad=True)
    v_old = torch.tensor([[0.5, 0.5]])
    v_ref = torch.tensor([[0.0, 0.0]])
    out = nft.nft_loss(v_theta, v_old, v_ref, x0, x_t, t, torch.tensor([0.75]), beta=1.0, kl_weight=0.1)
    # x0+ = [0.25, 0.5], x0- = [0.75, 0.0]; w+ = w- = 1.125
    assert out.pos_loss.item() == pytest.approx(1.25)
    assert out.neg_loss.item() == pytest.approx(2.03125 / 1.125)
    policy = (0.75 * 1.25 + 0.25 * 2.03125 / 1.125) * 5
    assert out.policy_loss.item() == pytest.approx(policy)
    assert out.kl_loss.item() == pytest.approx(0.5)
    assert out.loss.item() == pytest.approx(policy + 0.05)
    out.policy_loss.backward()
    # The adaptive weights are constants (stop-grad): d/dv = 5 (r * -e+ / 2.25 + (1-r) * e- / 2.25)
    assert v_theta.grad[0].tolist() == pytest.approx([10 / 9, 1.25 / 0.9], rel=1e-6)


def test_beta_mixes_old_and_new_and_weight_floor() -> None:
    x0 = torch.zeros(1, 3)
    x_t = torch.zeros(1, 3)
    t = torch.tensor([1.0])
    v = torch.zeros(1, 3)
    out = nft.nft_loss(v, v, None, x0, x_t, t, torch.tensor([1.0]), beta=0.5, kl_weight=0.0)
    assert out.pos_loss.item() == 0.0 and out.kl_loss.item() == 0.0  # zero error: weight clamps at 1e-5, no NaN


def test_advantages_and_r_mapping() -> None:
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0])
    adv = nft.advantages(rewards, 4)
    std = rewards.double().std(correction=0).item()
    expected = [c / (std + 1e-4) for c in (-1.5, -0.5, 0.5, 1.5, 0, 0, 0, 0)]
    assert adv.tolist() == pytest.approx(expected)
    big = nft.advantages(torch.tensor([0.0, 0.0, 0.0, 1000.0]), 4)
    assert big.max().item() <= 5.0 and big.min().item() >= -5.0
    assert nft.advantage_to_r(torch.tensor([-7.0, -5.0, 0.0, 2.5, 5.0])).tolist() == [0.0, 0.0, 0.5, 0.75, 1.0]


def test_conversion_seeded_reproduces_and_each_sample_has_its_own_permutation() -> None:
    sigmas = torch.linspace(1.0, 0.0, 11)
    torch.manual_seed(7)
    a = nft.convert(sigmas, 6, 10)
    torch.manual_seed(7)
    b = nft.convert(sigmas, 6, 10)
    assert torch.equal(a, b)
    assert a.shape == (6, nft.num_train_timesteps(10)) == (6, 9)
    assert len({tuple(row.tolist()) for row in a}) == 6
    for row in a:
        assert len(set(row.tolist())) == 9 and set(row.tolist()) <= set(sigmas[:10].tolist())
    c = nft.convert(sigmas, 6, 10)  # the RNG moved on: a different draw
    assert not torch.equal(a, c)


def test_ema() -> None:
    old = [torch.tensor([0.0, 4.0])]
    nft.ema_update(old, [torch.tensor([1.0, 0.0])], 0.25)
    assert old[0].tolist() == [0.75, 1.0]
    assert nft.ema_decay(0) == 0.0 and nft.ema_decay(100) == pytest.approx(0.1) and nft.ema_decay(10_000) == 0.5
    assert nft.ema_decay(10, slope=0.1, max_decay=0.9) == pytest.approx(0.9)


@pytest.mark.slow
def test_flops_formula_matches_torch_flop_counter() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from recipes.diffusion_nft.flops import image_tokens, transformer_forward_flops
    from recipes.diffusion_nft.models import build_transformer

    model = build_transformer("tiny", 0)
    cfg = model.config
    batch, text, latent = 2, 154, 16
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(hidden_states=torch.randn(batch, cfg.in_channels, latent, latent),
              encoder_hidden_states=torch.randn(batch, text, cfg.joint_attention_dim),
              pooled_projections=torch.randn(batch, cfg.pooled_projection_dim),
              timestep=torch.full((batch,), 500.0))
    projections = transformer_forward_flops(cfg, batch, image_tokens(cfg, latent), text, attention=False)
    # The counter does not see CPU's math attention; everything else must agree within 1%.
    assert counter.get_total_flops() == pytest.approx(projections, rel=0.01)
    assert transformer_forward_flops(cfg, batch, 64, text) > projections
