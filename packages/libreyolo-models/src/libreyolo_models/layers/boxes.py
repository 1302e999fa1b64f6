"""Box format conversions and overlaps.

Formats: ``xyxy`` is (x1, y1, x2, y2); ``xywh`` is (centre x, centre y, width, height). Pixel or
normalized units are the caller's choice; every function works on the last dimension and keeps
the leading ones, so the same code serves one image ``[N, 4]`` and a batch ``[B, N, 4]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``[..., 4]`` centre/size boxes to corner boxes."""
    xy, wh = boxes[..., :2], boxes[..., 2:4]
    half = wh / 2
    return torch.cat((xy - half, xy + half), dim=-1)


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """``[..., 4]`` corner boxes to centre/size boxes."""
    x1y1, x2y2 = boxes[..., :2], boxes[..., 2:4]
    return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim=-1)


def wh_area(wh: Tensor) -> Tensor:
    """Width times height of ``[..., 2]`` sides: one multiply. ``prod(-1)`` computes the same
    value, but its backward asks the host whether any factor is zero (a sync every training
    step, and clamped intersections are often zero)."""
    return wh[..., 0] * wh[..., 1]


def box_area(boxes: Tensor) -> Tensor:
    """Area of ``[..., 4]`` xyxy boxes (negative extents count as zero)."""
    return wh_area((boxes[..., 2:4] - boxes[..., :2]).clamp(min=0))


def box_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise IoU of xyxy boxes ``a [N, 4]`` and ``b [M, 4]`` -> ``[N, M]``."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = wh_area((rb - lt).clamp(min=0))
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return inter / (union + eps)


def aligned_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """IoU of xyxy boxes ``a[..., 4]`` vs ``b[..., 4]``, broadcasting the leading dimensions.

    Unlike :func:`box_iou` (two flat lists), this serves batched pairings: ``[B, G, 1, 4]`` against
    ``[B, 1, A, 4]`` gives every ground truth against every prediction of its own image, ``[B, G, A]``.
    """
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:4], b[..., 2:4])
    inter = wh_area((rb - lt).clamp(min=0))
    return inter / (box_area(a) + box_area(b) - inter + eps)


def aligned_ciou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU of matched xyxy boxes ``a[i]`` vs ``b[i]`` (``[..., 4]`` each) -> ``[...]``.

    CIoU = IoU - centre distance² / enclosing diagonal² - alpha * v, where v measures the
    aspect-ratio mismatch. It keeps a useful gradient when boxes do not overlap, which plain IoU
    does not (that is why the box loss uses it).
    """
    a1, a2 = a[..., :2], a[..., 2:4]
    b1, b2 = b[..., :2], b[..., 2:4]
    wa, ha = (a2 - a1).unbind(-1)
    wb, hb = (b2 - b1).unbind(-1)
    ha, hb = ha + eps, hb + eps
    inter = wh_area((torch.minimum(a2, b2) - torch.maximum(a1, b1)).clamp(min=0))
    union = wa * ha + wb * hb - inter + eps
    iou = inter / union
    enclose = torch.maximum(a2, b2) - torch.minimum(a1, b1)
    diag2 = enclose.pow(2).sum(-1) + eps
    centre2 = ((a1 + a2) - (b1 + b2)).pow(2).sum(-1) / 4
    v = (4 / math.pi**2) * (torch.atan(wb / hb) - torch.atan(wa / ha)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (centre2 / diag2 + v * alpha)


def aligned_giou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Generalised IoU of matched xyxy boxes ``a[i]`` vs ``b[i]`` (``[..., 4]``) -> ``[...]``.

    GIoU = IoU - (enclosing area - union) / enclosing area: in [-1, 1], and still informative
    (through the enclosing box) when the boxes do not overlap. Inverted boxes count as empty.
    Scale-free: pixels and grid units give the same value (up to ``eps``).
    """
    inter = wh_area((torch.minimum(a[..., 2:], b[..., 2:]) - torch.maximum(a[..., :2], b[..., :2])).clamp(min=0))
    union = box_area(a) + box_area(b) - inter
    enclose = wh_area((torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2])).clamp(min=0))
    return inter / union.clamp(min=eps) - (enclose - union) / enclose.clamp(min=eps)
