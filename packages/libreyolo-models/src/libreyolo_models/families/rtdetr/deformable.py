"""Multi-scale deformable attention in plain torch ops (``grid_sample``), no custom CUDA kernel.

Each query looks at only ``points`` locations per head and level, placed around its reference
box by learned offsets, and mixes them with learned weights: attention cost grows with the number
of queries, not with the number of pixels. Being plain ops it runs on any device, exports, and is
captured by a CUDA graph like any other kernel sequence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .determinism import needs_deterministic_backward


def sample_levels(value: Tensor, shapes: list[tuple[int, int]], locations: Tensor, weights: Tensor) -> Tensor:
    """The deformable attention core: bilinear samples of every level, weighted and summed.

    Args:
        value: ``[B, sum(h*w), heads, head_dim]``, the levels' tokens concatenated row-major.
        shapes: ``(h, w)`` of each level, in the order of ``value``.
        locations: ``[B, Q, heads, levels, points, 2]`` sampling points (x, y) in [0, 1]; points
            outside the map read zeros.
        weights: ``[B, Q, heads, levels, points]``, each query's weights (summing to one per head).

    Returns:
        ``[B, Q, heads * head_dim]``.
    """
    b, _, heads, head_dim = value.shape
    _, q, _, levels, points, _ = locations.shape
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * locations - 1  # grid_sample's [-1, 1] coordinates (align_corners=False)
    # grid_sample's CUDA backward accumulates with atomics (run-to-run noise); deterministic mode
    # gets the same bilinear sampling from gathers, whose backward torch makes deterministic.
    sample = _gather_bilinear if needs_deterministic_backward(value) else _grid_sample
    sampled = []
    for level, (h, w) in enumerate(shapes):
        # [B, h*w, heads, d] -> [B*heads, d, h, w]; [B, Q, heads, points, 2] -> [B*heads, Q, points, 2]
        v = per_level[level].flatten(2).permute(0, 2, 1).reshape(b * heads, head_dim, h, w)
        grid = grids[:, :, :, level].permute(0, 2, 1, 3, 4).flatten(0, 1)
        sampled.append(sample(v, grid))
    # [B*heads, d, Q, levels * points] weighted by [B*heads, 1, Q, levels * points]
    stacked = torch.stack(sampled, dim=-2).flatten(-2)
    mix = weights.permute(0, 2, 1, 3, 4).reshape(b * heads, 1, q, levels * points)
    return (stacked * mix).sum(-1).reshape(b, heads * head_dim, q).permute(0, 2, 1)


def _grid_sample(v: Tensor, grid: Tensor) -> Tensor:
    return F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _gather_bilinear(v: Tensor, grid: Tensor) -> Tensor:
    """``grid_sample(v, grid)`` (bilinear, zero padding, align_corners=False) from four gathers.

    ``v [N, C, H, W]``, ``grid [N, Q, P, 2]`` -> ``[N, C, Q, P]``; equal to ``grid_sample`` up to
    rounding, with the same gradients (the corner weights carry the gradient to ``grid``).
    """
    n, c, h, w = v.shape
    x = ((grid[..., 0] + 1) * w - 1) / 2    # pixel coordinates, pixel centres at integers
    y = ((grid[..., 1] + 1) * h - 1) / 2
    x0, y0 = x.floor(), y.floor()
    flat = v.flatten(2)
    out = v.new_zeros(n, c, grid.shape[1], grid.shape[2])
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xi, yi = x0 + dx, y0 + dy
        weight = (1 - (x - xi).abs()) * (1 - (y - yi).abs())
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().flatten(1)
        values = flat.gather(2, index[:, None].expand(n, c, index.shape[1])).view_as(out)
        out = out + values * (weight * inside)[:, None]
    return out


class MSDeformableAttention(nn.Module):
    """Deformable cross-attention from queries with reference boxes to multi-level memory.

    Module names (``sampling_offsets``, ``attention_weights``, ``value_proj``, ``output_proj``)
    are upstream's checkpoint keys.
    """

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
        """Offsets start as a ring of ``points`` growing steps per head (each head looks another
        way), attention starts uniform, projections Xavier: the deformable-DETR initialisation."""
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
        """``query [B, Q, dim]`` with ``reference [B, Q, 1, 4]`` boxes (cx, cy, w, h in [0, 1]) over
        ``memory [B, sum(h*w), dim]`` -> ``[B, Q, dim]``. Offsets are in units of the box's
        half-size divided by ``points``, so the sampling pattern scales with the box."""
        b, q, _ = query.shape
        value = self.value_proj(memory).reshape(b, memory.shape[1], self.heads, self.dim // self.heads)
        offsets = self.sampling_offsets(query).reshape(b, q, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(query).reshape(b, q, self.heads, self.levels * self.points)
        weights = weights.softmax(-1).reshape(b, q, self.heads, self.levels, self.points)
        centre, size = reference[:, :, None, :, None, :2], reference[:, :, None, :, None, 2:]
        locations = centre + offsets / self.points * size * 0.5
        return self.output_proj(sample_levels(value, shapes, locations, weights))
