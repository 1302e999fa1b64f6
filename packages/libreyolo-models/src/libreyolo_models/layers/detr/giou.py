"""Generalized IoU of xyxy boxes, broadcasting like ``layers.boxes.aligned_iou``.

GIoU = IoU - (enclosing area - union) / enclosing area, in [-1, 1]. Unlike IoU it still ranks
boxes that do not overlap (by how far apart they are), which is what both the matching cost and
the box loss of a DETR need from the first step on.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..boxes import box_area, wh_area


def generalized_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """GIoU of xyxy boxes ``a[..., 4]`` vs ``b[..., 4]``, broadcasting the leading dimensions.

    ``[N, 1, 4]`` against ``[1, M, 4]`` gives the pairwise ``[N, M]`` matrix; equal shapes give
    matched pairs. Areas are clamped to at least ``eps``, so degenerate (zero-area) boxes stay
    finite and every other pair is exact.
    """
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:4], b[..., 2:4])
    inter = wh_area((rb - lt).clamp(min=0))
    union = box_area(a) + box_area(b) - inter
    iou = inter / union.clamp(min=eps)
    hull = wh_area((torch.maximum(a[..., 2:4], b[..., 2:4]) - torch.minimum(a[..., :2], b[..., :2])).clamp(min=0))
    return iou - (hull - union) / hull.clamp(min=eps)
