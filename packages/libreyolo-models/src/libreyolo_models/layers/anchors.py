"""Anchor points and distance-based box coding for anchor-free heads.

Anchors sit at cell centres, ``(x + 0.5, y + 0.5)`` in grid units (YOLOX: at the corners, offset 0),
flattened row-major (y, then x) with levels in stride order: the layout upstream checkpoints and
their post-processing assume.
"""

from __future__ import annotations

import torch
from torch import Tensor


def level_shapes(maps: list[Tensor]) -> list[tuple[int, int]]:
    """``(H, W)`` of each ``[B, C, H, W]`` map, as the tensors report them (no ``int()``).

    Eagerly these are plain ints. While ``model.export`` traces the network they are symbolic
    sizes, so the anchors of an exported graph follow the image it is fed (``dynamic=True`` frees
    the image size); an ``int()`` here would freeze them at the traced size.
    """
    return [(m.shape[2], m.shape[3]) for m in maps]


def make_anchors(shapes: list[tuple[int, int]], strides: list[int] | tuple[int, ...], *,
                 device: torch.device, dtype: torch.dtype, offset: float = 0.5) -> tuple[Tensor, Tensor]:
    """Anchor points ``[A, 2]`` (grid units) and per-anchor strides ``[A, 1]`` for level shapes.

    ``offset`` 0.5 puts the points at cell centres; YOLOX decodes from cell corners (0.0).
    Built with ``arange`` on ``device`` (no host-to-device copy), so it is safe inside a CUDA graph.
    """
    points, stride_col = [], []
    for (h, w), s in zip(shapes, strides):
        ys = torch.arange(h, device=device, dtype=dtype) + offset
        xs = torch.arange(w, device=device, dtype=dtype) + offset
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((gx, gy), -1).view(-1, 2))
        stride_col.append(torch.full((h * w, 1), s, device=device, dtype=dtype))
    return torch.cat(points), torch.cat(stride_col)


def distances_to_boxes(dist: Tensor, anchors: Tensor, dim: int = -1) -> Tensor:
    """Left/top/right/bottom distances from anchors to xyxy boxes (same units as the anchors)."""
    lt, rb = dist.chunk(2, dim)
    return torch.cat((anchors - lt, anchors + rb), dim)


def boxes_to_distances(anchors: Tensor, boxes: Tensor, max_dist: float) -> Tensor:
    """xyxy boxes to left/top/right/bottom distances, clamped just below ``max_dist`` (DFL range)."""
    x1y1, x2y2 = boxes.chunk(2, -1)
    return torch.cat((anchors - x1y1, x2y2 - anchors), -1).clamp(0, max_dist - 0.01)


def dfl_expectation(logits: Tensor, reg_max: int) -> Tensor:
    """Expected distance under a softmax over ``reg_max`` bins.

    ``logits`` is ``[B, 4 * reg_max, A]`` (side-major: l, t, r, b, each ``reg_max`` bins); returns
    ``[B, 4, A]`` in grid units.
    """
    b, _, a = logits.shape
    probs = logits.view(b, 4, reg_max, a).softmax(2)
    bins = torch.arange(reg_max, device=logits.device, dtype=probs.dtype).view(1, 1, reg_max, 1)
    return (probs * bins).sum(2)
