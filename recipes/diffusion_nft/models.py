"""Model components: SD3 (tiny, SD3.5-medium shapes, or real weights from disk) and PickScore.

Nothing is downloaded. ``tiny`` and ``sd35m-shapes`` are randomly initialised from configs
(seeded, so every process builds the same weights); tokenizers for them are built in code
(a character-level BPE with no merges). ``--model-path`` / ``--pickscore-path`` load real
weights from local directories with ``local_files_only=True``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from recipes.diffusion_nft import seeds

# Special tokens of the in-code tokenizers. CLIP's eos must not be id 2: transformers then
# falls back to the legacy "argmax of input_ids" pooling.
_SPECIALS = ["<pad>", "<bos>", "<unk>", "<eos>"]
_CHARS = list(string.ascii_lowercase + string.digits + string.punctuation + " ")


def build_tokenizer(kind: str, model_max_length: int) -> Any:
    """A character-level tokenizer made offline: 'clip' adds bos/eos, 't5' adds eos only."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(_SPECIALS + _CHARS)}
    model = models.BPE(vocab=vocab, merges=[], unk_token="<unk>")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    if kind == "clip":
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A <eos>", special_tokens=[("<bos>", vocab["<bos>"]), ("<eos>", vocab["<eos>"])]
        )
    else:
        tok.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", vocab["<eos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=model_max_length,
        pad_token="<pad>",
        bos_token="<bos>" if kind == "clip" else None,
        eos_token="<eos>",
        unk_token="<unk>",
    )


TOKEN_IDS = {"pad": 0, "bos": 1, "unk": 2, "eos": 3}


@contextmanager
def init_on(device: str | torch.device, seed: int) -> Iterator[None]:
    """Create modules on ``device`` with weights from ``seed``, leaving the process RNG as it was.

    Building a model must not seed the process-global RNG as a side effect: that would hide
    exactly the unseeded-process bug this recipe demonstrates.
    """
    device = torch.device(device)
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), torch.device(device):
        torch.manual_seed(seed)
        yield


@dataclass(frozen=True)
class SD3Shapes:
    """Architecture numbers of an SD3 family model."""

    transformer: dict[str, Any]
    clip_l: dict[str, Any]
    clip_g: dict[str, Any]
    t5: dict[str, Any] | None
    vae: dict[str, Any]
    max_sequence_length: int


TINY = SD3Shapes(
    transformer=dict(
        sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=64, caption_projection_dim=32, pooled_projection_dim=64,
        pos_embed_max_size=32, dual_attention_layers=(0,), qk_norm="rms_norm",
    ),
    clip_l=dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                projection_dim=32, vocab_size=128, max_position_embeddings=77, hidden_act="gelu"),
    clip_g=dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                projection_dim=32, vocab_size=128, max_position_embeddings=77, hidden_act="gelu"),
    t5=dict(d_model=64, d_ff=64, d_kv=16, num_heads=4, num_layers=1, vocab_size=128,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=8),
    vae=dict(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1, latent_channels=4,
             norm_num_groups=4, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
             use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035),
    max_sequence_length=77,
)

# stabilityai/stable-diffusion-3.5-medium: MMDiT-X, 24 layers of 1536 (24 heads x 64),
# dual attention in layers 0-12, qk RMS norm; CLIP-L, CLIP-G (OpenCLIP bigG), T5-XXL; 16-ch VAE.
SD35_MEDIUM = SD3Shapes(
    transformer=dict(
        sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24, attention_head_dim=64,
        num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536, pooled_projection_dim=2048,
        pos_embed_max_size=384, dual_attention_layers=tuple(range(13)), qk_norm="rms_norm",
    ),
    clip_l=dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12,
                projection_dim=768, vocab_size=49408, max_position_embeddings=77, hidden_act="quick_gelu"),
    clip_g=dict(hidden_size=1280, intermediate_size=5120, num_attention_heads=20, num_hidden_layers=32,
                projection_dim=1280, vocab_size=49408, max_position_embeddings=77, hidden_act="gelu"),
    t5=dict(d_model=4096, d_ff=10240, d_kv=64, num_heads=64, num_layers=24, vocab_size=32128,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32),
    vae=dict(in_channels=3, out_channels=3, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
             latent_channels=16, norm_num_groups=32, down_block_types=("DownEncoderBlock2D",) * 4,
             up_block_types=("UpDecoderBlock2D",) * 4, use_quant_conv=False, use_post_quant_conv=False,
             shift_factor=0.0609, scaling_factor=1.5305),
    max_sequence_length=256,
)

SHAPES = {"tiny": TINY, "sd35m-shapes": SD35_MEDIUM}


def build_transformer(preset: str, init_seed: int, device: str | torch.device = "cpu") -> Any:
    """The SD3 transformer of a preset, randomly initialised from ``init_seed`` on ``device``."""
    from diffusers import SD3Transformer2DModel

    with init_on(device, seeds.weights(init_seed, "transformer")):
        return SD3Transformer2DModel(**SHAPES[preset].transformer)


# Distinct graphs a compiled block's forward may need: block kinds (dual attention, plain, the
# last context-pre-only block) x grad/no-grad x adapters on/off x batch sizes. Past dynamo's
# default limit (8) it would silently run the block eagerly again.
COMPILED_GRAPHS_PER_BLOCK_CODE = 64


def compile_blocks(transformer: Any, deterministic: bool) -> int:
    """Compile each transformer block in place (regional compilation); returns how many.

    ``nn.Module.compile`` keeps parameter names (no ``_orig_mod.`` prefix), so LoRA weights
    still sync by name between trainer and engines. Blocks share their code, so one block kind
    compiles once per input signature, not 24 times. Under ``deterministic``, Inductor's
    deterministic mode skips on-device benchmarking whose choice would change numerics
    (reduction configs picked by timing could differ between two runs); the kernels it
    generates are then a function of the graph alone. Shapes are static: each distinct batch
    size gets its own graph instead of one dynamic graph whose kernels depend on the order in
    which sizes were seen.
    """
    import torch._dynamo
    import torch._inductor.config

    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), COMPILED_GRAPHS_PER_BLOCK_CODE))
    if deterministic:
        torch._inductor.config.deterministic = True
    blocks = list(transformer.transformer_blocks)
    for block in blocks:
        block.compile(dynamic=False)
    return len(blocks)


def build_pipeline(preset: str, init_seed: int, model_path: str | None = None, device: str | torch.device = "cpu",
                   dtype: torch.dtype = torch.float32, scheduler_shift: float = 3.0,
                   built: Callable[[str], None] | None = None) -> Any:
    """A StableDiffusion3Pipeline: from ``model_path`` (local files only) or a preset's shapes.

    The pipeline provides ``encode_prompt`` and the VAE; the sampling loop is ours
    (``sampling.py``), since DiffusionNFT needs the final latent and the sigma schedule.
    ``built(name)`` is called as each component is ready (for a start-up timeline).
    """
    built = built or (lambda name: None)
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    if model_path is not None:
        kwargs: dict[str, Any] = {"local_files_only": True}
        if dtype != torch.float32:  # (newer diffusers call it `dtype`; both read `torch_dtype` for now)
            kwargs["torch_dtype"] = dtype
        pipe = StableDiffusion3Pipeline.from_pretrained(model_path, **kwargs)
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
            module = getattr(pipe, name, None)
            if module is not None:
                module.eval().requires_grad_(False)
        built("loaded")
        pipe = pipe.to(device)
        built("moved")
        return pipe
    shapes = SHAPES[preset]
    ids = dict(bos_token_id=TOKEN_IDS["bos"], eos_token_id=TOKEN_IDS["eos"], pad_token_id=TOKEN_IDS["pad"])
    with init_on(device, seeds.weights(init_seed, "clip_l")):
        text_encoder = CLIPTextModelWithProjection(CLIPTextConfig(**shapes.clip_l, **ids))
    built("clip_l")
    with init_on(device, seeds.weights(init_seed, "clip_g")):
        text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(**shapes.clip_g, **ids))
    built("clip_g")
    text_encoder_3 = None
    if shapes.t5 is not None:
        with init_on(device, seeds.weights(init_seed, "t5")):
            text_encoder_3 = T5EncoderModel(T5Config(**shapes.t5, pad_token_id=TOKEN_IDS["pad"],
                                                     eos_token_id=TOKEN_IDS["eos"]))
        built("t5")
    with init_on(device, seeds.weights(init_seed, "vae")):
        vae = AutoencoderKL(**shapes.vae)
    built("vae")
    transformer = build_transformer(preset, init_seed, device)
    built("transformer")
    # SD3.5's sampler: flow matching with a timestep shift (3.0 for SD3.5).
    scheduler = FlowMatchEulerDiscreteScheduler(shift=scheduler_shift)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=build_tokenizer("clip", 77),
        text_encoder_2=text_encoder_2,
        tokenizer_2=build_tokenizer("clip", 77),
        text_encoder_3=text_encoder_3,
        tokenizer_3=build_tokenizer("t5", shapes.max_sequence_length) if text_encoder_3 is not None else None,
    )
    for module in (text_encoder, text_encoder_2, text_encoder_3, vae):
        if module is not None:
            module.to(dtype=dtype).eval().requires_grad_(False)
    built("cast")
    return pipe


def max_sequence_length(preset: str, model_path: str | None) -> int:
    return 256 if model_path is not None else SHAPES[preset].max_sequence_length


# --- PickScore ------------------------------------------------------------------------


def build_pickscore(preset: str, init_seed: int, model_path: str | None = None, processor_path: str | None = None,
                    device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """(processor, CLIPModel) for PickScore.

    Real: ``yuvalkirstain/PickScore_v1`` weights and the
    ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K`` processor, each from a local directory.
    Otherwise a randomly initialised CLIP of the preset's size, run through the same code.
    """
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    if model_path is not None:
        processor = CLIPProcessor.from_pretrained(processor_path or model_path, local_files_only=True)
        model = CLIPModel.from_pretrained(model_path, local_files_only=True)
        return processor, model.to(device, dtype).eval().requires_grad_(False)
    if preset == "tiny":
        text = dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, vocab_size=128,
                    max_position_embeddings=77)
        vision = dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                      image_size=32, patch_size=8)
        projection, size = 32, 32
    else:  # ViT-H/14 shapes, as PickScore_v1
        text = dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_hidden_layers=24,
                    vocab_size=49408, max_position_embeddings=77)
        vision = dict(hidden_size=1280, intermediate_size=5120, num_attention_heads=16, num_hidden_layers=32,
                      image_size=224, patch_size=14)
        projection, size = 1024, 224
    ids = dict(bos_token_id=TOKEN_IDS["bos"], eos_token_id=TOKEN_IDS["eos"], pad_token_id=TOKEN_IDS["pad"])
    config = CLIPConfig(text_config={**text, **ids}, vision_config=vision, projection_dim=projection)
    with init_on(device, seeds.weights(init_seed, "pickscore")):
        model = CLIPModel(config)
    image_processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=build_tokenizer("clip", 77))
    return processor, model.to(dtype=dtype).eval().requires_grad_(False)
