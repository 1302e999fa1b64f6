"""The SAM network as published: ``image_encoder`` (``encoder``), ``prompt_encoder`` (``prompt``),
``mask_decoder`` (``decoder``): the keys of Meta's ``sam_vit_{b,l,h}_*.pth`` files, which are bare
state dicts of these three modules (the pixel mean and std are non-persistent, as upstream's).

``forward`` is the image encoder alone (normalisation inside, so it is captured with it); the
prompt side runs eagerly per prompt set (``decode``) on the cached embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ...layers.normalize import InputNormalize
from .decoder import MaskDecoder
from .encoder import PATCH, ImageEncoderViT
from .prompt import PromptEncoder

SIDE = 1024  # the published input side: 64 x 64 patches


@dataclass(frozen=True)
class SamArch:
    """One size as data (``build_sam.py``): encoder width, depth, heads, global-attention blocks."""

    width: int
    depth: int
    heads: int
    global_blocks: tuple[int, ...]
    grid: int = SIDE // PATCH
    window: int = 14


ARCHS: dict[str, SamArch] = {
    "b": SamArch(768, 12, 12, (2, 5, 8, 11)),
    "l": SamArch(1024, 24, 16, (5, 11, 17, 23)),
    "h": SamArch(1280, 32, 16, (7, 15, 23, 31)),
}


class Sam(nn.Module):
    """``[B, 3, S, S]`` RGB in [0, 1], padded with the pixel mean -> ``[B, 256, S / 16, S / 16]``."""

    def __init__(self, arch: SamArch, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        self.normalize = InputNormalize(mean, std)
        self.image_encoder = ImageEncoderViT(arch.width, arch.depth, arch.heads, arch.global_blocks, arch.grid,
                                             arch.window)
        self.prompt_encoder = PromptEncoder()
        self.mask_decoder = MaskDecoder()

    def forward(self, images: Tensor) -> Tensor:
        return self.image_encoder(self.normalize(images))

    def decode(self, embedding: Tensor, points: tuple[Tensor, Tensor] | None, boxes: Tensor | None,
               input_hw: tuple[int, int], multimask: bool, masks: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One picture's ``[1, 256, h, w]`` embedding and its prompts (input pixels; ``masks``:
        ``[P, 1, 4h, 4w]`` low-resolution logits) -> low-resolution mask logits ``[P, C, 4h, 4w]``
        and IoU predictions ``[P, C]``."""
        rows, cols = embedding.shape[-2], embedding.shape[-1]
        sparse, dense = self.prompt_encoder(points, boxes, input_hw, (rows, cols), masks)
        image_pe = self.prompt_encoder.dense_positions(rows, cols).to(embedding.dtype)
        return self.mask_decoder(embedding, image_pe, sparse.to(embedding.dtype), dense.to(embedding.dtype),
                                 multimask)
