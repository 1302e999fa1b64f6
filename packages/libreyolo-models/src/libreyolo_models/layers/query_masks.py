"""Instance masks from query features (RF-DETR's segmentation head, which EC's is derived from).

A pixel-feature map (a memory or encoder map, upsampled to ``1 / downsample`` of the input) is
refined by one depthwise block per decoder layer; each layer's query features, through a
residual MLP, dot every pixel's feature: ``mask[q, y, x] = <query q, pixel (y, x)> + bias``. Both
families read ``factors`` in training (the loss materialises only the matched queries' masks:
dense logits of every query would not fit) and the dense logits in inference.

Module names (``blocks.N.dwconv`` ...) are both upstreams' checkpoint keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DepthwiseConvBlock(nn.Module):
    """3x3 depthwise conv, LayerNorm (eps 1e-6), pointwise linear, GELU, residual (a ConvNeXt
    block without its expansion)."""

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
    """Mask logits at ``1 / downsample`` of the input from a pixel map and query features."""

    def __init__(self, dim: int, layers: int, downsample: int = 4) -> None:
        super().__init__()
        self.downsample = downsample
        self.blocks = nn.ModuleList(DepthwiseConvBlock(dim) for _ in range(layers))
        self.spatial_features_proj = nn.Conv2d(dim, dim, kernel_size=1)
        self.query_features_block = MLPBlock(dim)
        self.query_features_proj = nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.zeros(1))

    def factors(self, pixels: Tensor, queries: Tensor, image_hw: tuple[int, int],
                skip_blocks: bool = False) -> tuple[Tensor, Tensor]:
        """``(pixel features [L, B, C, H/d, W/d], query features [L, B, Q, C])`` for ``queries
        [L, B, Q, C]``: layer ``l`` reads the map after blocks ``0..l`` (only as many blocks run as
        there are layers given), or the bare upsampled map with ``skip_blocks``. The logits are
        ``einsum("lbchw,lbqc->lbqhw") + bias``."""
        size = (image_hw[0] // self.downsample, image_hw[1] // self.downsample)
        pixels = F.interpolate(pixels, size=size, mode="bilinear", align_corners=False)
        q = self.query_features_proj(self.query_features_block(queries))
        if skip_blocks:
            return pixels[None], q
        per_layer = []
        for block, _ in zip(self.blocks, queries):
            pixels = block(pixels)
            per_layer.append(self.spatial_features_proj(pixels))
        return torch.stack(per_layer), q

    def forward(self, pixels: Tensor, queries: Tensor, image_hw: tuple[int, int], skip_blocks: bool = False) -> Tensor:
        """Dense mask logits ``[L, B, Q, H/d, W/d]``."""
        maps, q = self.factors(pixels, queries, image_hw, skip_blocks)
        return torch.einsum("lbchw,lbqc->lbqhw", maps, q) + self.bias
