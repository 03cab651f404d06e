"""scan-rng finds the draws that matter most in diffusion RL and that a library makes for the
caller (issue #23): diffusers' noise with generator=None (DA105), and a shuffling DataLoader or a
RandomSampler without a generator (DA106), each with the process that runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from scan_tree import by_code, root, write_tree  # noqa: F401 (root: a fixture)

from detaudit.scan import ScanConfig, scan
from detaudit.scan.rules import RULE_BY_CODE

ROLLOUT = {
    "gen/__init__.py": "",
    "gen/sampler.py": """
        import torch
        from diffusers.utils.torch_utils import randn_tensor


        def step_noise(shape, generator=None):
            return randn_tensor(shape, generator=generator, dtype=torch.float32)


        def fixed_noise(shape, gen):
            return randn_tensor(shape, gen)


        def start_latents(pipe, batch, dtype, device, generator=None):
            return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, generator)


        def given_latents(pipe, batch, dtype, device, latents):
            return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, None, latents)


        def own_noise(shape):
            return randn_tensor(shape)


        def warm_start(pipe, batch, dtype, device, generator=None, latents=None):
            return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, generator, latents)
        """,
    "gen/engine.py": """
        import ray
        import torch

        from gen.sampler import own_noise, start_latents, step_noise, warm_start


        @ray.remote
        class RolloutEngine:
            def generate(self, pipe, batch):
                latents = start_latents(pipe, batch, torch.float32, "cpu")
                noise = step_noise(latents.shape)
                return latents + noise + own_noise(latents.shape) + warm_start(pipe, batch, torch.float32, "cpu")


        @ray.remote
        class SeededEngine:
            def __init__(self, seed):
                self.gen = torch.Generator().manual_seed(seed)

            def generate(self, pipe, batch):
                latents = start_latents(pipe, batch, torch.float32, "cpu", generator=self.gen)
                return latents + step_noise(latents.shape, generator=self.gen)
        """,
}


def test_diffusers_noise_with_generator_none_is_found_with_its_process(root: Path) -> None:
    write_tree(root, ROLLOUT)
    found = by_code("gen")
    direct = found["return randn_tensor(shape)"]
    assert direct.rule == "DA105" and direct.severity == "error"
    assert [(p["entry"], p["seeded"]) for p in direct.processes] == [("RolloutEngine (Ray actor)", False)]
    # generator=None forwarded by the tree's own wrappers: found at the call sites that pass none
    # (latents forwarded from a None-default parameter may be None: no guard either)
    for code in ("return randn_tensor(shape, generator=generator, dtype=torch.float32)",
                 "return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, generator)",
                 "return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, generator, latents)"):
        draw = found[code]
        assert draw.rule == "DA105" and draw.severity == "error", code
        assert [p["entry"] for p in draw.processes] == ["RolloutEngine (Ray actor)"], code
        assert "gen/engine.py" in draw.note and "SeededEngine" not in draw.note, code
    # a generator passed positionally, or latents given: no draw
    assert "return randn_tensor(shape, gen)" not in found
    assert "return pipe.prepare_latents(batch, 16, 64, 64, dtype, device, None, latents)" not in found


def test_a_prepare_latents_the_tree_defines_is_scanned_as_code_not_as_a_library_draw(root: Path) -> None:
    write_tree(root, {"pipes/__init__.py": "", "pipes/mine.py": """
        import torch


        class MyPipeline:
            def prepare_latents(self, batch, channels, height, width, dtype, device, generator=None):
                return torch.zeros(batch, channels, height, width, dtype=dtype, device=device)

            def __call__(self, batch):
                return self.prepare_latents(batch, 4, 8, 8, torch.float32, "cpu")
        """})
    assert not [f for f in scan(["pipes"], ScanConfig(), use_cache=False).findings if f.rule == "DA105"]


LOADERS = {
    "data/__init__.py": "",
    "data/loaders.py": """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


        def train_loader(ds, cfg):
            return DataLoader(ds, batch_size=8, shuffle=True)


        def configured_loader(ds, cfg):
            return DataLoader(ds, batch_size=8, shuffle=cfg.shuffle)


        def positional_loader(ds):
            return DataLoader(ds, 8, True)


        def sampled(ds):
            return DataLoader(ds, sampler=RandomSampler(ds))


        def seeded_loader(ds, seed):
            return DataLoader(ds, shuffle=True, generator=torch.Generator().manual_seed(seed))


        def ordered_loader(ds):
            return DataLoader(ds, shuffle=False)


        def distributed(ds, rank):
            return DataLoader(ds, sampler=DistributedSampler(ds, rank=rank, seed=3))


        def seeded_sampler(ds, g):
            return RandomSampler(ds, generator=g)


        if __name__ == "__main__":
            train_loader([], None)
            configured_loader([], None)
            positional_loader([])
            sampled([])
        """,
}


def test_shuffling_loaders_without_a_generator(root: Path) -> None:
    write_tree(root, LOADERS)
    found = {code: f for code, f in by_code("data").items() if f.rule == "DA106"}
    assert set(found) == {"return DataLoader(ds, batch_size=8, shuffle=True)",
                          "return DataLoader(ds, batch_size=8, shuffle=cfg.shuffle)",
                          "return DataLoader(ds, 8, True)",
                          "return DataLoader(ds, sampler=RandomSampler(ds))"}
    assert all(f.severity == "error" and [p["entry"] for p in f.processes] == ["__main__ of data.loaders"]
               for f in found.values())
    assert "(shuffle=cfg.shuffle)" in found["return DataLoader(ds, batch_size=8, shuffle=cfg.shuffle)"].message


@pytest.mark.parametrize("code", ["DA105", "DA106"])
def test_explain_the_library_rules(code: str) -> None:
    rule = RULE_BY_CODE[code]
    result = run_cli("scan-rng", "--explain", code)
    assert result.code == 0
    for part in (rule.summary, rule.why, rule.fix, rule.example, "RNG family: the process-global torch RNG"):
        assert part in result.out
