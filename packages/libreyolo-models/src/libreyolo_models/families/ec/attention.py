"""EC's deformable cross-attention (D-FINE's "v2" form): a different number of sampling points per
level, no value or output projection (the memory is read as it is), offsets scaled by
``1 / points`` of the level and by half the reference box.

``num_points_scale`` (``1 / points`` for every point) is a persistent buffer, as upstream stores
it. Module names are upstream's checkpoint keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def sample_points(values: list[Tensor], shapes: list[tuple[int, int]], locations: Tensor, weights: Tensor,
                  points: list[int]) -> Tensor:
    """The attention core.

    Args:
        values: per level ``[B, heads, head_dim, h*w]``.
        shapes: ``(h, w)`` per level.
        locations: ``[B, Q, heads, sum(points), 2]`` (x, y) in [0, 1]; outside reads zeros.
        weights: ``[B, Q, heads, sum(points)]``, softmaxed over all levels' points together.
        points: sampling points per level.

    Returns:
        ``[B, Q, heads * head_dim]``.
    """
    b, heads, head_dim, _ = values[0].shape
    q = locations.shape[1]
    grids = (2 * locations - 1).permute(0, 2, 1, 3, 4).flatten(0, 1).split(points, dim=-2)
    sampled = [F.grid_sample(value.reshape(b * heads, head_dim, h, w), grid, mode="bilinear",
                             padding_mode="zeros", align_corners=False)
               for value, (h, w), grid in zip(values, shapes, grids)]
    mix = weights.permute(0, 2, 1, 3).reshape(b * heads, 1, q, sum(points))
    return (torch.cat(sampled, -1) * mix).sum(-1).reshape(b, heads * head_dim, q).permute(0, 2, 1)


class DeformableAttention(nn.Module):
    """Queries with reference boxes sample ``points[l]`` locations per head on level ``l``."""

    num_points_scale: Tensor

    def __init__(self, dim: int, heads: int, points: list[int], offset_scale: float = 0.5) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} must be divisible by the {heads} heads")
        self.heads, self.points, self.offset_scale = heads, list(points), offset_scale
        scale = [1 / n for n in self.points for _ in range(n)]
        self.register_buffer("num_points_scale", torch.tensor(scale, dtype=torch.float32))
        total = heads * sum(self.points)
        self.sampling_offsets = nn.Linear(dim, total * 2)
        self.attention_weights = nn.Linear(dim, total)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Offsets start on a ring per head growing with the point's rank in its level; uniform
        attention."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.heads, dtype=torch.float32) * (2 * math.pi / self.heads)
        ring = torch.stack((angles.cos(), angles.sin()), -1)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        steps = torch.cat([torch.arange(1, n + 1) for n in self.points]).reshape(1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_((ring.reshape(self.heads, 1, 2) * steps).flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)

    def forward(self, query: Tensor, reference: Tensor, values: list[Tensor], shapes: list[tuple[int, int]]) -> Tensor:
        """``query [B, Q, dim]``, ``reference [B, Q, 1, 4]`` (cx, cy, w, h in [0, 1]), ``values``
        per level ``[B, heads, head_dim, h*w]`` -> ``[B, Q, dim]``."""
        b, q = query.shape[:2]
        total = sum(self.points)
        offsets = self.sampling_offsets(query).reshape(b, q, self.heads, total, 2)
        weights = self.attention_weights(query).reshape(b, q, self.heads, total).softmax(-1)
        scale = self.num_points_scale.to(query.dtype).unsqueeze(-1)
        locations = reference[:, :, None, :, :2] + offsets * scale * reference[:, :, None, :, 2:] * self.offset_scale
        return sample_points(values, shapes, locations, weights, self.points)
