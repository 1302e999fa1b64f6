"""Multi-scale deformable cross-attention (Deformable DETR) in plain torch ops, as RF-DETR uses it.

Each query looks at ``points`` locations per head and level, placed around its reference box by
learned offsets (in units of the box's half-size over ``points``), and mixes them with learned
weights: the cost grows with the queries, not the pixels. ``grid_sample`` does the bilinear reads,
so it runs anywhere, exports, and is captured by a CUDA graph like any other kernel sequence.
Module names are upstream's checkpoint keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def sample_levels(value: Tensor, shapes: list[tuple[int, int]], locations: list[Tensor], weights: Tensor) -> Tensor:
    """Bilinear samples of every level, weighted and summed.

    Args:
        value: ``[B, sum(h*w), heads, head_dim]``, the levels' tokens concatenated row-major.
        shapes: ``(h, w)`` of each level, in the order of ``value``.
        locations: per level, ``[B, Q, heads, points, 2]`` sampling points (x, y) in [0, 1];
            points outside the map read zeros. One tensor per level keeps every tensor at rank 5
            or less, which Core ML requires.
        weights: ``[B, Q, heads, levels * points]``, summing to one per head.

    Returns:
        ``[B, Q, heads * head_dim]``.
    """
    b, _, heads, head_dim = value.shape
    _, q, _, points, _ = locations[0].shape
    per_level = value.split([h * w for h, w in shapes], dim=1)
    sampled = []
    for level, (h, w) in enumerate(shapes):
        v = per_level[level].permute(0, 2, 3, 1).reshape(b * heads, head_dim, h, w)
        grid = 2 * locations[level] - 1  # grid_sample's [-1, 1] coordinates (align_corners=False)
        grid = grid.transpose(1, 2).flatten(0, 1)                          # [B*heads, Q, points, 2]
        sampled.append(F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros", align_corners=False))
    stacked = torch.stack(sampled, dim=-2).flatten(-2)                      # [B*heads, d, Q, L*P]
    mix = weights.transpose(1, 2).reshape(b * heads, 1, q, len(shapes) * points)
    return (stacked * mix).sum(-1).view(b, heads * head_dim, q).transpose(1, 2)


class DeformableAttention(nn.Module):
    """Deformable cross-attention from queries with reference boxes to (multi-level) memory."""

    def __init__(self, dim: int, heads: int, levels: int, points: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} must be divisible by the {heads} heads")
        self.dim, self.heads, self.levels, self.points = dim, heads, levels, points
        self.sampling_offsets = nn.Linear(dim, heads * levels * points * 2)
        self.attention_weights = nn.Linear(dim, heads * levels * points)
        self.value_proj = nn.Linear(dim, dim)
        self.output_proj = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Offsets start as a ring of growing steps per head (each head looks another way),
        attention uniform, projections Xavier: the Deformable DETR initialisation."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.heads, dtype=torch.float32) * (2.0 * math.pi / self.heads)
        ring = torch.stack((angles.cos(), angles.sin()), -1)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        steps = torch.arange(1, self.points + 1, dtype=torch.float32).view(1, 1, -1, 1)
        grid = ring.view(self.heads, 1, 1, 2).repeat(1, self.levels, self.points, 1) * steps
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, query: Tensor, reference: Tensor, memory: Tensor, shapes: list[tuple[int, int]]) -> Tensor:
        """``query [B, Q, dim]`` with ``reference [B, Q, levels, 4]`` boxes (cx, cy, w, h in [0, 1])
        over ``memory [B, sum(h*w), dim]`` -> ``[B, Q, dim]``."""
        b, q, _ = query.shape
        value = self.value_proj(memory).view(b, memory.shape[1], self.heads, self.dim // self.heads)
        offsets = self.sampling_offsets(query).view(b, q, self.heads, self.levels, self.points * 2)
        weights = self.attention_weights(query).view(b, q, self.heads, self.levels * self.points).softmax(-1)
        locations = []
        for level in range(self.levels):  # per level: no rank-6 tensor (Core ML takes rank 5 at most)
            centre, size = reference[:, :, None, level, None, :2], reference[:, :, None, level, None, 2:]
            step = offsets[:, :, :, level].view(b, q, self.heads, self.points, 2)
            locations.append(centre + step / self.points * size * 0.5)
        return self.output_proj(sample_levels(value, shapes, locations, weights))
