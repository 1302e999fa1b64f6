"""RF-DETR's task heads beyond boxes: instance-mask logits (segment) and keypoints (pose).

Segment: the projector's memory map, upsampled to stride 4, is refined by one depthwise block
per decoder layer; each layer's query features (through a residual MLP) dot every pixel's
feature: ``masks[q, y, x] = <query q, pixel (y, x)> + bias``. The proposals (encoder) skip the
blocks. In training the head hands out the factors (pixel features, query features, bias) instead
of the dense ``[B, Q, H/4, W/4]`` logits of 13 x 300 queries: the loss materialises only the
matched queries' masks.

Pose: an MLP predicts per query ``K x (dx, dy, visibility logit)``; keypoints are placed like box
centres, relative to the query's reference box (``xy = d * ref_wh + ref_cxcy``).

Module names are upstream's checkpoint keys.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .transformer import MLP


class DepthwiseConvBlock(nn.Module):
    """3x3 depthwise conv, LayerNorm, pointwise linear, GELU, residual (a ConvNeXt block without
    its expansion)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        return x + F.gelu(self.pwconv1(self.norm(y))).permute(0, 3, 1, 2)


class MLPBlock(nn.Module):
    """Pre-norm residual MLP (4x expansion, GELU) on query features."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm_in = nn.LayerNorm(dim)
        self.layers = nn.ModuleList([nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim)])

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm_in(x)
        for layer in self.layers:
            y = layer(y)
        return x + y


class SegmentationHead(nn.Module):
    """Mask logits at ``1 / downsample`` of the input from the memory map and query features."""

    def __init__(self, dim: int, layers: int, downsample: int = 4) -> None:
        super().__init__()
        self.downsample = downsample
        self.blocks = nn.ModuleList(DepthwiseConvBlock(dim) for _ in range(layers))
        self.spatial_features_proj = nn.Conv2d(dim, dim, kernel_size=1)
        self.query_features_block = MLPBlock(dim)
        self.query_features_proj = nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.zeros(1))

    def factors(self, memory_map: Tensor, queries: Tensor, image_hw: tuple[int, int],
                skip_blocks: bool = False) -> tuple[Tensor, Tensor]:
        """``(pixels [L, B, C, H/4, W/4], queries [L, B, Q, C])`` for ``queries [L, B, Q, C]``;
        ``masks = einsum(pixels, queries) + bias``."""
        size = (image_hw[0] // self.downsample, image_hw[1] // self.downsample)
        pixels = F.interpolate(memory_map, size=size, mode="bilinear", align_corners=False)
        q = self.query_features_proj(self.query_features_block(queries))
        if skip_blocks:
            return pixels[None], q
        per_layer = []
        for block, _ in zip(self.blocks, queries):
            pixels = block(pixels)
            per_layer.append(self.spatial_features_proj(pixels))
        return torch.stack(per_layer), q

    def forward(self, memory_map: Tensor, queries: Tensor, image_hw: tuple[int, int],
                skip_blocks: bool = False) -> Tensor:
        """Dense mask logits ``[L, B, Q, H/4, W/4]``."""
        pixels, q = self.factors(memory_map, queries, image_hw, skip_blocks)
        return torch.einsum("lbchw,lbqc->lbqhw", pixels, q) + self.bias


class KeypointHead(MLP):
    """``[..., dim]`` -> ``[..., K * 3]`` raw keypoint offsets and visibility logits."""

    def __init__(self, dim: int, keypoints: int) -> None:
        super().__init__(dim, dim, keypoints * 3, 3)
        self.keypoints = keypoints
        last = cast(nn.Linear, self.layers[-1])
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)


def decode_keypoints(raw: Tensor, reference: Tensor) -> Tensor:
    """``raw [..., Q, K*3]`` with reference boxes ``[..., Q, 4]`` -> ``[..., Q, K, 3]``: x, y
    normalised to the input, then the raw visibility logit."""
    kp = raw.view(*raw.shape[:-1], -1, 3)
    xy = kp[..., :2] * reference[..., None, 2:] + reference[..., None, :2]
    return torch.cat((xy, kp[..., 2:3]), -1)
