"""Hungarian matching of predictions to ground truths (eager, on the host, never graphed).

Every ground truth gets exactly one prediction, chosen to minimise the total cost
``2 * class + 5 * L1 + 2 * (-GIoU)`` over the image; the remaining predictions are background.
The class cost is the focal-loss difference between predicting the class and not predicting it.
The assignment itself is ``scipy.optimize.linear_sum_assignment``, one call per image and
prediction set: the cost matrices of a whole step are computed batched on the device and copied
to the host once.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from ..boxes import aligned_iou, xywh_to_xyxy
from .giou import generalized_iou
from .targets import GroupedTargets

Match = tuple[np.ndarray, np.ndarray]
"""``(prediction indices, ground-truth indices)`` of one image, int64, equal lengths."""


class HungarianMatcher:
    """Minimum-cost one-to-one assignment (see the module docstring).

    Args:
        cost_class, cost_bbox, cost_giou: weights of the three costs (RT-DETR: 2, 5, 2).
        alpha, gamma: focal-loss parameters of the class cost (0.25, 2).
    """

    def __init__(self, *, cost_class: float = 2.0, cost_bbox: float = 5.0, cost_giou: float = 2.0,
                 alpha: float = 0.25, gamma: float = 2.0) -> None:
        if min(cost_class, cost_bbox, cost_giou) < 0 or cost_class + cost_bbox + cost_giou == 0:
            raise ValueError(f"matching cost weights (class {cost_class}, bbox {cost_bbox}, giou {cost_giou}) "
                             "must be >= 0 and not all 0")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
        self.alpha, self.gamma = alpha, gamma

    @torch.no_grad()
    def cost(self, logits: Tensor, boxes: Tensor, gt_labels: Tensor, gt_boxes: Tensor, *,
             iou_order: float | None = None) -> Tensor:
        """Cost of every prediction against every ground truth of its own image.

        Args:
            logits: ``[S, B, Q, C]`` raw class logits of ``S`` prediction sets.
            boxes: ``[S, B, Q, 4]`` cx, cy, w, h in [0, 1].
            gt_labels: ``int64 [B, G]`` (any valid class on padding). gt_boxes: ``[B, G, 4]`` cx, cy, w, h.

            iou_order: DEIMv2's late-training cost ``-p * IoU**iou_order`` instead of the weighted
                sum: it ranks by how well a prediction already fits (score and overlap together).

        Returns:
            ``float32 [S, B, Q, G]``, on the predictions' device.
        """
        s, b, q, _ = logits.shape
        g = gt_labels.shape[1]
        prob = logits.float().sigmoid().gather(-1, gt_labels[None, :, None, :].expand(s, b, q, g))
        pred = boxes.float()[:, :, :, None]         # [S, B, Q, 1, 4]
        gt = gt_boxes.float()[None, :, None]         # [1, B, 1, G, 4]
        if iou_order is not None:
            return -prob * aligned_iou(xywh_to_xyxy(pred), xywh_to_xyxy(gt)).pow(iou_order)
        positive = self.alpha * (1 - prob) ** self.gamma * -(prob + 1e-8).log()
        negative = (1 - self.alpha) * prob**self.gamma * -(1 - prob + 1e-8).log()
        l1 = (pred - gt).abs().sum(-1)
        giou = generalized_iou(xywh_to_xyxy(pred), xywh_to_xyxy(gt))
        return self.cost_class * (positive - negative) + self.cost_bbox * l1 - self.cost_giou * giou

    def __call__(self, logits: Tensor, boxes: Tensor, targets: GroupedTargets, *,
                 iou_order: float | None = None) -> list[list[Match]]:
        """Matches of each of ``S`` prediction sets (``[S, B, Q, ...]``) for each image: ``[S][B]``.

        Raises:
            FloatingPointError: a cost is NaN or infinite (the network's outputs are; training has
                diverged), naming the set and image.
        """
        sets, batch = logits.shape[:2]
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if targets.max_count == 0:
            return [[empty] * batch for _ in range(sets)]
        labels, gt_boxes, _ = targets.padded(pad_label=0)
        device = logits.device
        costs = self.cost(logits, boxes, labels.to(device, non_blocking=True),
                          gt_boxes.to(device, non_blocking=True), iou_order=iou_order).cpu().numpy()
        matches: list[list[Match]] = []
        for s in range(sets):
            row: list[Match] = []
            for b, n in enumerate(targets.counts):
                if n == 0:
                    row.append(empty)
                    continue
                cost = costs[s, b, :, :n]
                if not np.isfinite(cost).all():
                    raise FloatingPointError(
                        f"Hungarian matching: the cost of prediction set {s}, image {b} is not finite (NaN or inf in "
                        "the network's outputs: training diverged); lower lr0, keep max_grad_norm small, or "
                        "train with amp=False")
                pred, gt = linear_sum_assignment(cost)
                row.append((pred.astype(np.int64), gt.astype(np.int64)))
            matches.append(row)
        return matches
