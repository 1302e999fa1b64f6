"""Fine-grained distribution refinement (D-FINE): boxes as four edge-offset distributions.

Instead of regressing a box, each decoder layer predicts, for each edge of a reference box, a
distribution over ``reg_max + 1`` bins whose positions follow a non-uniform weighting function
W(n): dense near zero (fine corrections), sparse towards ``±2 * up * reg_scale`` (coarse ones).
The edge offset is the distribution's expectation; each layer adds its logits to the previous
layer's, so later layers refine earlier ones. Offsets are in units of the reference box's size
divided by ``reg_scale``. The loss side turns a target box back into the two bins around each
true offset (:func:`bbox2distance`), so a distribution can be trained like a classification.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..boxes import xyxy_to_xywh


def weighting_function(reg_max: int, up: Tensor, reg_scale: Tensor) -> Tensor:
    """W(n): the ``reg_max + 1`` bin positions, ``float [reg_max + 1]``, symmetric around 0.

    Built from the one-element ``up`` and ``reg_scale`` tensors with tensor ops only (no
    ``.item()``), so it follows the decoder's device and dtype and is safe inside a CUDA graph.
    The ends are ``±2 * |up * reg_scale|``; between them the steps grow geometrically.
    """
    bound = up.abs() * reg_scale.abs()          # [1]
    step = (bound + 1) ** (2 / (reg_max - 2))
    right = [step**i - 1 for i in range(1, reg_max // 2)]  # integer powers, as upstream computes them
    return torch.cat((-(bound * 2), *(-r for r in reversed(right)), torch.zeros_like(bound), *right, bound * 2))


def integral(corners: Tensor, project: Tensor) -> Tensor:
    """Expected edge offsets ``[..., 4]`` of ``corners [..., 4 * (reg_max + 1)]`` logits over ``project``."""
    bins = project.shape[0]
    prob = F.softmax(corners.reshape(-1, bins), dim=1)
    return F.linear(prob, project).reshape(*corners.shape[:-1], 4)


def distance2bbox(points: Tensor, distance: Tensor, reg_scale: Tensor) -> Tensor:
    """Reference boxes ``points [..., 4]`` (cx, cy, w, h) moved by edge offsets ``distance [..., 4]``
    (left, top, right, bottom) -> cx, cy, w, h. An offset of 0 keeps the edge where the reference
    box has it; 1 moves it by ``size / reg_scale``."""
    scale = reg_scale.abs()
    half = 0.5 * scale
    x1 = points[..., 0] - (half + distance[..., 0]) * (points[..., 2] / scale)
    y1 = points[..., 1] - (half + distance[..., 1]) * (points[..., 3] / scale)
    x2 = points[..., 0] + (half + distance[..., 2]) * (points[..., 2] / scale)
    y2 = points[..., 1] + (half + distance[..., 3]) * (points[..., 3] / scale)
    return xyxy_to_xywh(torch.stack((x1, y1, x2, y2), -1))


def _bin_weights(offsets: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each offset between two bins: ``(left bin index as float, weight of the right bin, of the left)``.

    Offsets below the first bin go wholly to bin 0; at or past the last one, to the last (index
    ``reg_max - 0.1`` so the right neighbour stays in range for the loss).
    """
    reg_max = values.shape[0] - 1
    left = ((values[None] - offsets[:, None]) <= 0).sum(1) - 1        # last bin at or below
    index = left.float()
    inside = (left >= 0) & (left < reg_max)
    safe = left.clamp(0, reg_max - 1)
    left_gap = (offsets - values[safe]).abs()
    right_gap = (values[safe + 1] - offsets).abs()
    right_weight = torch.where(inside, left_gap / (left_gap + right_gap), torch.zeros_like(offsets))
    below, above = left < 0, left >= reg_max
    right_weight = torch.where(above, torch.ones_like(offsets), right_weight)
    left_weight = torch.where(inside, 1.0 - right_weight, torch.where(below, 1.0, 0.0))
    index = torch.where(below, torch.zeros_like(index), index)
    index = torch.where(above, torch.full_like(index, reg_max - 0.1), index)
    return index, right_weight, left_weight


@torch.no_grad()
def bbox2distance(points: Tensor, boxes: Tensor, reg_max: int, reg_scale: Tensor, up: Tensor,
                  eps: float = 0.1) -> tuple[Tensor, Tensor, Tensor]:
    """Target edge offsets of ``boxes [N, 4]`` (xyxy) from references ``points [N, 4]`` (cx, cy, w, h),
    as soft bin targets for the fine-grained localisation loss.

    Returns ``(target [4N], right weight [4N], left weight [4N])``: each edge's left bin (a float,
    clamped below ``reg_max - eps``) and how much of the target each of its two bins carries.
    """
    scale = reg_scale.abs()
    half = 0.5 * scale
    w = points[:, 2] / scale + 1e-16
    h = points[:, 3] / scale + 1e-16
    left = (points[:, 0] - boxes[:, 0]) / w - half
    top = (points[:, 1] - boxes[:, 1]) / h - half
    right = (boxes[:, 2] - points[:, 0]) / w - half
    bottom = (boxes[:, 3] - points[:, 1]) / h - half
    offsets = torch.stack((left, top, right, bottom), -1).reshape(-1)
    index, right_weight, left_weight = _bin_weights(offsets, weighting_function(reg_max, up, reg_scale))
    return index.clamp(min=0, max=reg_max - eps), right_weight, left_weight
