"""The Depth Anything V2 network: DINOv2 (``pretrained``) + DPT head (``depth_head``), as published.

Sizes and their facts from the official repository (``run.py``'s ``model_configs`` and
``dpt.py``'s ``intermediate_layer_idx``; see ``docs/families/depthanything.md``): ViT-S/B/L with
14-pixel patches and positions learned at 518 px (37 x 37 patches), the DPT head reading the
outputs of four blocks. The output is relative depth (larger is nearer: an affine-invariant
inverse depth), ReLU'd, at the input's resolution. Input normalisation (ImageNet mean / std) is
the first layer, inside the graph. Keys: ``pretrained.*`` (``layers.dinov2``) and
``depth_head.*`` (``dpt``), the official checkpoints' own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.dinov2 import DinoVisionTransformer
from ...layers.normalize import InputNormalize
from .dpt import DPTHead

PATCH = 14
GRID = 37  # 518 / 14: the patch layout the positions were learned at


@dataclass(frozen=True)
class DepthArch:
    """One size as data: the encoder, the blocks the head reads, and the head's widths."""

    width: int
    depth: int
    heads: int
    layers: tuple[int, int, int, int]
    features: int
    out_channels: tuple[int, int, int, int]
    grid: int = GRID


ARCHS: dict[str, DepthArch] = {
    "s": DepthArch(384, 12, 6, (2, 5, 8, 11), 64, (48, 96, 192, 384)),
    "b": DepthArch(768, 12, 12, (2, 5, 8, 11), 128, (96, 192, 384, 768)),
    "l": DepthArch(1024, 24, 16, (4, 11, 17, 23), 256, (256, 512, 1024, 1024)),
}


class DepthAnythingV2(nn.Module):
    """``[B, 3, H, W]`` RGB in [0, 1] (H, W multiples of 14) -> ``[B, H, W]`` relative depth (>= 0)."""

    def __init__(self, arch: DepthArch, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        self.layers = arch.layers
        self.normalize = InputNormalize(mean, std)
        self.pretrained = DinoVisionTransformer(arch.width, arch.depth, arch.heads, patch=PATCH, grid=arch.grid)
        self.depth_head = DPTHead(arch.width, arch.features, arch.out_channels, PATCH)

    def forward(self, images: Tensor) -> Tensor:
        rows, cols = images.shape[-2] // PATCH, images.shape[-1] // PATCH
        levels = self.pretrained.intermediate_layers(self.normalize(images), self.layers)
        depth = self.depth_head([tokens for tokens, _ in levels], rows, cols)
        return F.relu(depth).squeeze(1)
