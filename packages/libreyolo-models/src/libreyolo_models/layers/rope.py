"""2D rotary position embedding for ViT patch tokens (DINOv3's form), as a layer.

Each head's channels are rotated in pairs by angles proportional to the token's (y, x) position,
so attention scores depend on relative positions. Coordinates are the patch centres normalised
per axis to [-1, 1] (``separate``), so a grid of another size reads the same frequencies: no
table to interpolate. The ``periods`` (one per quarter of a head's channels) are a persistent
buffer, as upstream checkpoints store them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class RopePositionEmbedding(nn.Module):
    """Sines and cosines for ``H x W`` patch grids.

    Args:
        width: the ViT's width; heads: its heads (head width must be a multiple of 4).
        base: period growth: ``periods[i] = base ** (2 i / (head_dim / 2))``.
    """

    periods: Tensor

    def __init__(self, width: int, heads: int, base: float = 100.0) -> None:
        super().__init__()
        head_dim = width // heads
        if head_dim % 4:
            raise ValueError(f"2D RoPE needs a head width divisible by 4; {width} / {heads} heads = {head_dim}")
        self.head_dim, self.base = head_dim, base
        self.register_buffer("periods", torch.empty(head_dim // 4), persistent=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        steps = torch.arange(self.head_dim // 4, dtype=torch.float32)
        self.periods.copy_(self.base ** (2 * steps / (self.head_dim // 2)))

    def forward(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """``(sin, cos)``, each ``[1, 1, H*W, head_dim]`` (float32), tokens row-major."""
        device = self.periods.device
        ys = torch.arange(0.5, height, device=device, dtype=torch.float32) / height
        xs = torch.arange(0.5, width, device=device, dtype=torch.float32) / width
        coords = torch.stack(torch.meshgrid(ys, xs, indexing="ij"), -1).flatten(0, 1)
        coords = 2.0 * coords - 1.0
        angles = 2 * math.pi * coords[:, :, None] / self.periods[None, None, :]
        angles = angles.flatten(1, 2).repeat(1, 2)
        return angles.sin()[None, None], angles.cos()[None, None]


def apply_rope(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """Rotate ``x [..., N, head_dim]`` (its two channel halves as pairs) by the angles, in ``x``'s
    dtype: the float32 angles would otherwise promote half-precision queries and keys away from
    their values' dtype (a model in ``.half()`` fails in attention)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return (x * cos + rotated * sin).to(x.dtype)
