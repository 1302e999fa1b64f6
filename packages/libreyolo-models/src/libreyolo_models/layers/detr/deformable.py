"""Multi-scale deformable attention in plain torch ops (``grid_sample``), no custom CUDA kernel.

Each query looks at only a few locations per head and level, placed around its reference box by
learned offsets, and mixes them with learned weights: attention cost grows with the number of
queries, not with the number of pixels. Being plain ops it runs on any device, exports, and is
captured by a CUDA graph like any other kernel sequence.

Three upstream layouts share this module: RT-DETR's (``value_proj``/``output_proj``, the same
points on every level), RT-DETRv2's (the same plus a persistent ``num_points_scale`` buffer, and
per-level point counts) and D-FINE's (per-level counts and the buffer, but no projections: the
decoder's memory is sampled as it is).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .determinism import needs_deterministic_backward


def sample_levels(value: Tensor, shapes: list[tuple[int, int]], locations: Tensor, weights: Tensor,
                  points: Sequence[int]) -> Tensor:
    """The deformable attention core: bilinear samples of every level, weighted and summed.

    Args:
        value: ``[B, sum(h*w), heads, head_dim]``, the levels' tokens concatenated row-major.
        shapes: ``(h, w)`` of each level, in the order of ``value``.
        locations: ``[B, Q, heads, P, 2]`` sampling points (x, y) in [0, 1], level-major
            (``P = sum(points)``); points outside the map read zeros.
        weights: ``[B, Q, heads, P]``, each query's weights (summing to one per head).
        points: sampling points of each level.

    Returns:
        ``[B, Q, heads * head_dim]``.
    """
    b, _, heads, head_dim = value.shape
    q, total = locations.shape[1], locations.shape[3]
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = (2 * locations - 1).permute(0, 2, 1, 3, 4).flatten(0, 1)  # [B*heads, Q, P, 2], grid_sample's [-1, 1]
    # grid_sample's CUDA backward accumulates with atomics (run-to-run noise); deterministic mode
    # gets the same bilinear sampling from gathers, whose backward torch makes deterministic.
    sample = _gather_bilinear if needs_deterministic_backward(value) else _grid_sample
    sampled = []
    for level, ((h, w), grid) in enumerate(zip(shapes, grids.split(list(points), dim=2))):
        # [B, h*w, heads, d] -> [B*heads, d, h, w]
        v = per_level[level].flatten(2).permute(0, 2, 1).reshape(b * heads, head_dim, h, w)
        sampled.append(sample(v, grid))
    # [B*heads, d, Q, P] weighted by [B*heads, 1, Q, P]
    mix = weights.permute(0, 2, 1, 3).reshape(b * heads, 1, q, total)
    return (torch.cat(sampled, dim=-1) * mix).sum(-1).reshape(b, heads * head_dim, q).permute(0, 2, 1)


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

    Args:
        dim, heads, levels: width, attention heads, memory levels.
        points: sampling points per head and level: one number for every level, or one per level.
        projections: ``value_proj`` and ``output_proj`` linear layers around the sampling
            (RT-DETR, RT-DETRv2); D-FINE's family samples the memory directly.
        scale_buffer: keep ``num_points_scale`` (1 / points of each sampling point's level) as a
            persistent buffer, as RT-DETRv2 and D-FINE checkpoints do; else (RT-DETR) every
            level has the same count and the scale is the Python constant ``1 / points``.

    Module names (``sampling_offsets``, ``attention_weights``, ``value_proj``, ``output_proj``)
    are upstream's checkpoint keys.
    """

    num_points_scale: Tensor

    def __init__(self, dim: int, heads: int, levels: int, points: int | Sequence[int], *,
                 projections: bool = True, scale_buffer: bool = False) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} must be divisible by the {heads} heads")
        self.points = [points] * levels if isinstance(points, int) else list(points)
        if len(self.points) != levels:
            raise ValueError(f"{len(self.points)} point counts {self.points} for {levels} levels")
        self.dim, self.heads, self.levels = dim, heads, levels
        total = sum(self.points)
        if scale_buffer:
            scale = torch.tensor([1 / n for n in self.points for _ in range(n)], dtype=torch.float32)
            self.register_buffer("num_points_scale", scale)
        elif len(set(self.points)) != 1:
            raise ValueError(f"per-level point counts {self.points} need scale_buffer=True (upstream's layout)")
        self.scale_buffer = scale_buffer
        self.sampling_offsets = nn.Linear(dim, heads * total * 2)
        self.attention_weights = nn.Linear(dim, heads * total)
        self.value_proj: nn.Linear | None = nn.Linear(dim, dim) if projections else None
        self.output_proj: nn.Linear | None = nn.Linear(dim, dim) if projections else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Offsets start as a ring of growing steps per head (each head looks another way),
        attention starts uniform, projections Xavier: the deformable-DETR initialisation."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.heads, dtype=torch.float32) * (2.0 * math.pi / self.heads)
        ring = torch.stack((angles.cos(), angles.sin()), -1)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        steps = torch.cat([torch.arange(1, n + 1, dtype=torch.float32) for n in self.points]).view(1, -1, 1)
        grid = ring.view(self.heads, 1, 2) * steps
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            if proj is not None:
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)

    def forward(self, query: Tensor, reference: Tensor, memory: Tensor, shapes: list[tuple[int, int]]) -> Tensor:
        """``query [B, Q, dim]`` with ``reference [B, Q, 1, 4]`` boxes (cx, cy, w, h in [0, 1]) over
        ``memory [B, sum(h*w), dim]`` -> ``[B, Q, dim]``. Offsets are in units of the box's
        half-size divided by its level's point count, so the sampling pattern scales with the box."""
        b, q, _ = query.shape
        total = sum(self.points)
        value = self.value_proj(memory) if self.value_proj is not None else memory
        value = value.reshape(b, memory.shape[1], self.heads, self.dim // self.heads)
        offsets = self.sampling_offsets(query).reshape(b, q, self.heads, total, 2)
        weights = self.attention_weights(query).reshape(b, q, self.heads, total).softmax(-1)
        scale: Tensor | float = (self.num_points_scale.to(query.dtype)[:, None] if self.scale_buffer
                                 else 1.0 / self.points[0])
        locations = reference[:, :, None, :, :2] + offsets * scale * reference[:, :, None, :, 2:] * 0.5
        out = sample_levels(value, shapes, locations, weights, self.points)
        return self.output_proj(out) if self.output_proj is not None else out
