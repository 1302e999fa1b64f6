"""A plain per-image, per-ground-truth reference of RTMDet's dynamic soft-label assignment.

Written for clarity, not speed (loops, boolean selection, Python ints): the tests check the
batched assigner against it, and ``tools/bench_rtmdet_assigner.py`` times both. Semantics are
mmdetection's ``DynamicSoftLabelAssigner`` (restated in the batched module's docstring); the only
intended difference is the batched version's cap on the centre cost, which never decides a pick
in these tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU ``[N, 4] x [M, 4] -> [N, M]`` (the batched code's formula, eps 1e-7)."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + 1e-7)


def assign_one_image(logits: Tensor, boxes: Tensor, priors: Tensor, strides: Tensor, gt_labels: Tensor,
                     gt_boxes: Tensor, *, topk: int = 13, radius: float = 3.0,
                     iou_weight: float = 3.0) -> tuple[Tensor, Tensor]:
    """One image: ``(gt_index [A] with -1 on background, quality [A])``."""
    a, c = logits.shape
    gt_index = torch.full((a,), -1, dtype=torch.long)
    quality = torch.zeros(a)
    if len(gt_boxes) == 0:
        return gt_index, quality
    inside = torch.stack([((priors[:, 0] > g[0]) & (priors[:, 1] > g[1]) & (priors[:, 0] < g[2])
                           & (priors[:, 1] < g[3])) for g in gt_boxes], 1)  # [A, G]
    valid = inside.any(1)
    if not valid.any():
        return gt_index, quality
    idx = valid.nonzero()[:, 0]
    iou = _iou(boxes[idx], gt_boxes)  # [V, G]
    centre = (gt_boxes[:, :2] + gt_boxes[:, 2:]) / 2
    dist = (priors[idx, None] - centre[None]).pow(2).sum(-1).sqrt() / strides[idx, None]
    cost = 10.0 ** (dist - radius) - torch.log(iou + 1e-7) * iou_weight
    onehot = F.one_hot(gt_labels.long(), c).float()  # [G, C]
    for g in range(len(gt_boxes)):
        soft = onehot[g][None] * iou[:, g, None]  # [V, C]
        p = logits[idx]
        cost[:, g] += (F.binary_cross_entropy_with_logits(p, soft, reduction="none")
                       * (soft - p.sigmoid()).pow(2)).sum(-1)
    matching = torch.zeros_like(cost, dtype=torch.bool)
    k_max = min(topk, len(idx))
    dynamic_k = iou.topk(k_max, dim=0).values.sum(0).int().clamp(min=1)
    for g in range(len(gt_boxes)):
        chosen = cost[:, g].topk(int(dynamic_k[g]), largest=False).indices
        matching[chosen, g] = True
    for v in range(len(idx)):
        if matching[v].sum() > 1:
            matching[v] = False
            matching[v, cost[v].argmin()] = True
    for v in range(len(idx)):
        if matching[v].any():
            g = int(matching[v].float().argmax())
            gt_index[idx[v]] = g
            quality[idx[v]] = iou[v, g]
    return gt_index, quality
