"""Rewards: PickScore (CLIP preference model) and JPEG compressibility (weights-free, DDPO)."""

from __future__ import annotations

import io

import torch

PICKSCORE_DIVISOR = 26.0  # PickScore's logits sit around 20-23; /26 keeps rewards near [0, 1]


class PickScore:
    """score = logit_scale.exp() * cos(image_emb, text_emb) / 26, embeddings L2-normalised."""

    def __init__(self, processor, model, device: torch.device, dtype: torch.dtype = torch.float32,
                 preprocess: str = "processor") -> None:
        self.processor = processor
        self.model = model
        self.device = device
        self.dtype = dtype
        self.preprocess = preprocess

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        if self.preprocess == "torch":
            pixel_values = clip_pixels(images, self.processor.image_processor)
        else:
            pixel_values = self.processor(images=to_pil(images), return_tensors="pt")["pixel_values"]
        text_inputs = self.processor(text=prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        pixel_values = pixel_values.to(self.device, self.dtype)
        image_emb = self.model.get_image_features(pixel_values=pixel_values)
        text_emb = self.model.get_text_features(
            input_ids=text_inputs["input_ids"].to(self.device),
            attention_mask=text_inputs["attention_mask"].to(self.device),
        )
        image_emb = _features(image_emb)
        text_emb = _features(text_emb)
        image_emb = image_emb / image_emb.norm(dim=-1, keepdim=True)
        text_emb = text_emb / text_emb.norm(dim=-1, keepdim=True)
        scores = self.model.logit_scale.exp() * (image_emb * text_emb).sum(dim=-1)
        return (scores / PICKSCORE_DIVISOR).float().cpu()


def clip_pixels(images: torch.Tensor, image_processor) -> torch.Tensor:
    """uint8 [N, 3, H, W] -> CLIP pixel values, as the CLIP image processor prepares them (shortest
    edge resized bicubically, rounded to uint8 levels, centre crop, rescale, normalise), but as torch
    ops in one fixed order on the CPU. PIL and numpy pick their resampling and arithmetic code by
    CPU; these ops, run under a portable profile's baseline kernels and one thread, give the same
    bits on any x86 CPU. Not bit-equal to the processor: PIL resamples in two passes rounded to
    uint8 between them, torch in one float pass; on smooth images (what a sampler makes) the two
    differ by a level or two, on pixel noise by up to about ten."""
    edge = image_processor.size["shortest_edge"]
    crop_h, crop_w = image_processor.crop_size["height"], image_processor.crop_size["width"]
    x = images.detach().to("cpu", torch.float32)
    height, width = x.shape[-2:]
    short, long = min(height, width), max(height, width)
    resized_long = int(edge * long / short)  # truncated, as transformers' get_resize_output_image_size
    size = (edge, resized_long) if height <= width else (resized_long, edge)
    if size != (height, width):
        x = torch.nn.functional.interpolate(x, size=size, mode="bicubic", align_corners=False, antialias=True)
        x = x.round().clamp(0.0, 255.0)  # PIL resamples to uint8 levels
    top, left = (x.shape[-2] - crop_h) // 2, (x.shape[-1] - crop_w) // 2
    x = x[..., top : top + crop_h, left : left + crop_w]
    x = x * float(image_processor.rescale_factor)
    mean = torch.tensor(image_processor.image_mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(image_processor.image_std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x - mean) / std


def _features(output) -> torch.Tensor:
    # transformers 5 returns a model output with pooler_output; 4.x returned the tensor.
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def jpeg_compressibility(images: torch.Tensor, prompts: list[str] | None = None, quality: int = 95) -> torch.Tensor:
    """Negative JPEG size in kB (DDPO's compressibility reward): smaller files score higher."""
    sizes = []
    for image in to_pil(images):
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=quality)
        sizes.append(-buffer.tell() / 1000.0)
    return torch.tensor(sizes, dtype=torch.float32)


def to_pil(images: torch.Tensor) -> list:
    """uint8 [N, 3, H, W] -> PIL images."""
    from PIL import Image

    array = images.permute(0, 2, 3, 1).contiguous().numpy()
    return [Image.fromarray(a) for a in array]
