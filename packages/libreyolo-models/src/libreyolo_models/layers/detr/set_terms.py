"""The per-match terms every DETR set loss here is built from (eager only, never graphed).

Matches come as ``int64 [4, K]`` index rows (prediction set, image, query, ground-truth row),
so one call scores every matched query of ``S`` stacked prediction sets (decoder layers, the
encoder's top-k, ...) at once. Terms return unnormalised sums; the losses divide by their counts.

- ``varifocal``: a matched query's target at its class is its IoU with the ground truth,
  everything else 0; positives are weighted by that target, negatives by ``alpha * p**gamma``, so
  easy background fades and the score learns localisation quality (RT-DETR, D-FINE).
- ``matchability_aware`` (DEIM's MAL): the positive target is ``IoU**gamma`` with weight 1 and
  negatives weigh ``p**gamma`` (no alpha): low-IoU matches, common once dense one-to-one matching
  adds many small objects, are not pushed to full confidence, and are not ignored either.
- ``box_terms``: L1 of cx, cy, w, h and 1 - GIoU.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..boxes import aligned_iou, xywh_to_xyxy
from ..giou import generalized_iou
from ..hungarian import Match
from .denoising import DenoisingQueries

EMPTY_MATCH: Match = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def pair_index(matches: list[list[Match]], offsets: list[int], device: torch.device) -> Tensor:
    """``matches[s][b]`` (query, ground truth within image ``b``) -> ``int64 [4, K]`` rows of
    (set, image, query, ground-truth row in the flat target list), on ``device``."""
    rows = [np.stack((np.full_like(p, s), np.full_like(p, b), p, g + offsets[b]))
            for s, per_image in enumerate(matches) for b, (p, g) in enumerate(per_image) if len(p)]
    flat = np.concatenate(rows, 1) if rows else np.zeros((4, 0), np.int64)
    return torch.from_numpy(flat).to(device, non_blocking=True)


def denoising_matches(denoising: DenoisingQueries) -> list[Match]:
    """Each image's positive denoising copies answer its ground truths by construction."""
    per_image = []
    for b, n in enumerate(denoising.counts):
        if n == 0 or denoising.groups == 0:
            per_image.append(EMPTY_MATCH)
        else:
            per_image.append((denoising.positive_slots(b).numpy(), np.tile(np.arange(n), denoising.groups)))
    return per_image


def matched_boxes(boxes: Tensor, index: Tensor, gt_boxes: Tensor) -> tuple[Tensor, Tensor]:
    """``(predicted, ground truth)`` cx, cy, w, h of every match, ``[K, 4]`` each."""
    return boxes[index[0], index[1], index[2]], gt_boxes[index[3]]


def box_terms(boxes: Tensor, index: Tensor, gt_boxes: Tensor) -> tuple[Tensor, Tensor]:
    """``(L1 sum, (1 - GIoU) sum)`` over the matches of ``boxes [S, B, Q, 4]``."""
    pred, truth = matched_boxes(boxes, index, gt_boxes)
    l1 = (pred - truth).abs().sum()
    giou = (1 - generalized_iou(xywh_to_xyxy(pred), xywh_to_xyxy(truth))).sum()
    return l1, giou


def matched_iou(boxes: Tensor, index: Tensor, gt_boxes: Tensor) -> Tensor:
    """Detached IoU of every match, ``[K]``."""
    pred, truth = matched_boxes(boxes, index, gt_boxes)
    return aligned_iou(xywh_to_xyxy(pred.detach()), xywh_to_xyxy(truth))


def _class_targets(logits: Tensor, index: Tensor, labels: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``value`` at each match's (set, image, query, class), zeros elsewhere; and where that is."""
    where = (index[0], index[1], index[2], labels)
    target = torch.zeros_like(logits).index_put_(where, value.to(logits.dtype))
    positive = torch.zeros_like(logits, dtype=torch.bool).index_put_(where, torch.ones_like(labels, dtype=torch.bool))
    return target, positive


def varifocal(logits: Tensor, iou: Tensor, index: Tensor, labels: Tensor, *, alpha: float, gamma: float) -> Tensor:
    """Varifocal sum over ``logits [S, B, Q, C]`` (see the module docstring); ``iou``/``labels`` per match."""
    target, positive = _class_targets(logits, index, labels, iou)
    prob = logits.detach().sigmoid()
    weight = torch.where(positive, target, alpha * prob.pow(gamma))
    return F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum")


def matchability_aware(logits: Tensor, iou: Tensor, index: Tensor, labels: Tensor, *, gamma: float) -> Tensor:
    """DEIM's matchability-aware sum over ``logits [S, B, Q, C]`` (see the module docstring)."""
    target, positive = _class_targets(logits, index, labels, iou.pow(gamma))
    prob = logits.detach().sigmoid()
    weight = torch.where(positive, torch.ones_like(prob), prob.pow(gamma))
    return F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum")
