"""Fine-grained distribution refinement (D-FINE's box coding), shared by EC's decoder and loss.

A box is predicted as four edge distributions (left, top, right, bottom) over ``reg_max + 1``
bins whose values ``W(n)`` grow non-uniformly away from 0 (fine steps near the reference edge,
coarse far away), scaled by the reference box's size. The decoder refines the distributions layer
by layer; the loss supervises them directly (FGL) through the two bins around the target edge.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...layers.boxes import xyxy_to_xywh


def weighting_function(reg_max: int, up: Tensor, reg_scale: Tensor) -> Tensor:
    """The ``reg_max + 1`` bin values W(n): ``[-2u, -(s**k) + 1 ..., 0, ..., s**k - 1, 2u]`` with
    ``u = |up| * |reg_scale|`` and step ``s = (u + 1) ** (2 / (reg_max - 2))``.

    ``up`` and ``reg_scale`` are one-element parameters of the network (checkpoint values)."""
    bound = up[0].abs() * reg_scale.abs()
    step = (bound + 1) ** (2 / (reg_max - 2))
    left = [-(step**i) + 1 for i in range(reg_max // 2 - 1, 0, -1)]
    right = [step**i - 1 for i in range(1, reg_max // 2)]
    return torch.cat([-2 * bound] + left + [torch.zeros_like(up[0][None])] + right + [2 * bound], 0)


def integral(corners: Tensor, project: Tensor, reg_max: int) -> Tensor:
    """``[..., n * (reg_max + 1)]`` logits -> ``[..., n]`` expected distances (softmax . W); n = 4
    box edges, or 2 keypoint coordinates."""
    prob = corners.reshape(-1, reg_max + 1).softmax(1)
    return (prob * project.to(prob.device)).sum(-1).reshape(*corners.shape[:-1], -1)


def distance2bbox(points: Tensor, distance: Tensor, reg_scale: Tensor) -> Tensor:
    """Edge distances (in units of ``size / reg_scale`` beyond half a box) around cx, cy, w, h
    ``points`` -> cx, cy, w, h boxes."""
    reg_scale = reg_scale.abs()
    x1 = points[..., 0] - (0.5 * reg_scale + distance[..., 0]) * (points[..., 2] / reg_scale)
    y1 = points[..., 1] - (0.5 * reg_scale + distance[..., 1]) * (points[..., 3] / reg_scale)
    x2 = points[..., 0] + (0.5 * reg_scale + distance[..., 2]) * (points[..., 2] / reg_scale)
    y2 = points[..., 1] + (0.5 * reg_scale + distance[..., 3]) * (points[..., 3] / reg_scale)
    return xyxy_to_xywh(torch.stack((x1, y1, x2, y2), -1))


def bbox2distance(points: Tensor, boxes: Tensor, reg_max: int, reg_scale: Tensor, up: Tensor,
                  eps: float = 0.1) -> tuple[Tensor, Tensor, Tensor]:
    """FGL targets: each target edge as a fractional bin index and the weights of its two bins.

    Args:
        points: ``[n, 4]`` cx, cy, w, h references; boxes: ``[n, 4]`` x1, y1, x2, y2 targets.

    Returns:
        ``(index [4n], weight_right [4n], weight_left [4n])`` (edges side-major per box): the
        left bin is ``floor(index)``; an edge beyond the outermost bins goes wholly to it.
    """
    reg_scale = reg_scale.abs()
    unit_w = points[:, 2] / reg_scale + 1e-16
    unit_h = points[:, 3] / reg_scale + 1e-16
    edges = torch.stack(((points[:, 0] - boxes[:, 0]) / unit_w - 0.5 * reg_scale,
                         (points[:, 1] - boxes[:, 1]) / unit_h - 0.5 * reg_scale,
                         (boxes[:, 2] - points[:, 0]) / unit_w - 0.5 * reg_scale,
                         (boxes[:, 3] - points[:, 1]) / unit_h - 0.5 * reg_scale), -1).reshape(-1)
    values = weighting_function(reg_max, up, reg_scale)
    left = (values[None] <= edges[:, None]).sum(1) - 1
    index = left.float()
    inside = (left >= 0) & (left < reg_max)
    safe = left.clamp(0, reg_max - 1)
    lo, hi = values[safe], values[safe + 1]
    d_lo, d_hi = (edges - lo).abs(), (hi - edges).abs()
    weight_right = torch.where(inside, d_lo / (d_lo + d_hi), torch.zeros_like(edges))
    weight_left = torch.where(inside, 1.0 - weight_right, torch.zeros_like(edges))
    below, above = left < 0, left >= reg_max
    weight_left = torch.where(below, torch.ones_like(edges), weight_left)
    index = torch.where(below, torch.zeros_like(index), index)
    weight_right = torch.where(above, torch.ones_like(edges), weight_right)
    index = torch.where(above, torch.full_like(index, reg_max - 0.1), index)
    index = index.clamp(min=0, max=reg_max - eps)
    return index.detach(), weight_right.detach(), weight_left.detach()
