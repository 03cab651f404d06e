"""The prompts: a built-in set or a file, and which of them each rollout samples."""

from __future__ import annotations

from pathlib import Path

from recipes.diffusion_nft import seeds

BUILTIN_PROMPTS = (
    "a photo of a red fox in fresh snow",
    "an astronaut riding a horse on the moon",
    "a watercolor painting of a lighthouse at dawn",
    "a bowl of ramen with a soft boiled egg",
    "a cat wearing a tiny wizard hat",
    "a futuristic city skyline at night, neon lights",
    "an oil painting of sunflowers in a blue vase",
    "a steaming cup of coffee on a wooden table",
    "a small cabin in a pine forest under the milky way",
    "a portrait of an old sailor with a white beard",
    "a bicycle leaning against a yellow wall",
    "a koi pond with lily pads, top-down view",
    "a dragon made of origami paper",
    "a rainy street in tokyo reflected in puddles",
    "a macro photo of a honeybee on lavender",
    "a vintage robot reading a newspaper",
)


def load_prompts(path: Path | None) -> list[str]:
    if path is None:
        return list(BUILTIN_PROMPTS)
    prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise SystemExit(f"{path}: no prompts")
    return prompts


def rollout_prompts(prompts: list[str], rollout: int, count: int, seed: int) -> list[tuple[int, str]]:
    """The (index, prompt) pairs of a rollout: a fixed function of (seed, rollout), no RNG state."""
    ranked = sorted(range(len(prompts)), key=lambda i: seeds.prompt_rank(seed, rollout, i))
    return [(i, prompts[i]) for i in ranked[:count]]
