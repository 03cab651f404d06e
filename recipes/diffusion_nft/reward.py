"""Rewards: PickScore (CLIP preference model) and JPEG compressibility (weights-free, DDPO)."""

from __future__ import annotations

import io

import torch

PICKSCORE_DIVISOR = 26.0  # PickScore's logits sit around 20-23; /26 keeps rewards near [0, 1]


class PickScore:
    """score = logit_scale.exp() * cos(image_emb, text_emb) / 26, embeddings L2-normalised."""

    def __init__(self, processor, model, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        self.processor = processor
        self.model = model
        self.device = device
        self.dtype = dtype

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        pil = to_pil(images)
        image_inputs = self.processor(images=pil, return_tensors="pt")
        text_inputs = self.processor(text=prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        pixel_values = image_inputs["pixel_values"].to(self.device, self.dtype)
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
