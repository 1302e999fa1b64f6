"""Hungarian matching of a set predictor's queries to ground truths (eager, host side, never graphed).

Every ground truth gets exactly one query, chosen to minimise the image's total cost
``cost_class * class + cost_bbox * L1 + cost_giou * (-GIoU)``; the other queries are background.
The class cost is the focal-loss difference between predicting the ground truth's class and not
predicting it. Group DETR (RF-DETR) trains several independent query groups at once: each group is
matched on its own, so each ground truth gets one query per group. DEIMv2 switches late in
training to ``-p * IoU**order``, which ranks by how well a query already fits (score and overlap
together). One matcher serves every set predictor here (RT-DETR's kit, D-FINE's, RF-DETR, EC).

The cost matrices of a whole step are computed batched on the device and copied to the host once;
``scipy.optimize.linear_sum_assignment`` then solves one image and group at a time.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from .boxes import aligned_iou, xywh_to_xyxy
from .giou import generalized_iou
from .set_targets import GroupedTargets

log = logging.getLogger(__name__)

Match = tuple[np.ndarray, np.ndarray]
"""``(query indices, ground-truth indices)`` of one image, int64, equal lengths."""

EMPTY_MATCH: Match = (np.zeros(0, np.int64), np.zeros(0, np.int64))

EPS_LOG = 1e-8
"""The ``log(p + eps)`` of the RT-DETR / D-FINE lineage's class cost (the kit's families and EC);
RF-DETR takes exact log-sigmoids (``log_eps=None``)."""


class HungarianMatcher:
    """Minimum-cost one-to-one assignment per image (and per query group).

    Args:
        cost_class, cost_bbox, cost_giou: weights of the three costs (2, 5, 2 in RT-DETR, D-FINE,
            RF-DETR and EC).
        alpha, gamma: focal-loss parameters of the class cost (0.25, 2).
        log_eps: how the class cost takes logarithms: None reads ``log(p)`` as the exact
            log-sigmoid of the logit (RF-DETR); a number adds it inside the log, ``log(p + eps)``
            (D-FINE and EC, 1e-8). The two differ only for saturated logits.
    """

    def __init__(self, *, cost_class: float = 2.0, cost_bbox: float = 5.0, cost_giou: float = 2.0,
                 alpha: float = 0.25, gamma: float = 2.0, log_eps: float | None = None) -> None:
        if min(cost_class, cost_bbox, cost_giou) < 0 or cost_class + cost_bbox + cost_giou == 0:
            raise ValueError(f"matching cost weights (class {cost_class}, bbox {cost_bbox}, giou {cost_giou}) "
                             "must be >= 0 and not all 0")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
        self.alpha, self.gamma, self.log_eps = alpha, gamma, log_eps
        self._warned = False

    @torch.no_grad()
    def cost(self, logits: Tensor, boxes: Tensor, gt_labels: Tensor, gt_boxes: Tensor, *,
             iou_order: float | None = None) -> Tensor:
        """Cost of every query against every ground truth of its own image.

        Args:
            logits: ``[S, B, Q, C]`` raw class logits of ``S`` prediction sets.
            boxes: ``[S, B, Q, 4]`` cx, cy, w, h in [0, 1].
            gt_labels: ``int64 [B, G]`` (any valid class on padding). gt_boxes: ``[B, G, 4]`` cx, cy, w, h.
            iou_order: DEIMv2's late-training cost ``-p * IoU**iou_order`` instead of the weighted sum.

        Returns:
            ``float32 [S, B, Q, G]``, on the predictions' device.
        """
        s, b, q, _ = logits.shape
        g = gt_labels.shape[1]
        x = logits.float().gather(-1, gt_labels[None, :, None, :].expand(s, b, q, g))
        prob = x.sigmoid()
        pred = boxes.float()[:, :, :, None]          # [S, B, Q, 1, 4]
        gt = gt_boxes.float()[None, :, None]          # [1, B, 1, G, 4]
        if iou_order is not None:
            return -prob * aligned_iou(xywh_to_xyxy(pred), xywh_to_xyxy(gt)).pow(iou_order)
        if self.log_eps is None:
            log_pos, log_neg = F.logsigmoid(x), F.logsigmoid(-x)
        else:
            log_pos, log_neg = (prob + self.log_eps).log(), (1 - prob + self.log_eps).log()
        positive = self.alpha * (1 - prob) ** self.gamma * -log_pos
        negative = (1 - self.alpha) * prob**self.gamma * -log_neg
        l1 = (pred - gt).abs().sum(-1)
        giou = generalized_iou(xywh_to_xyxy(pred), xywh_to_xyxy(gt))
        return self.cost_class * (positive - negative) + self.cost_bbox * l1 - self.cost_giou * giou

    def __call__(self, logits: Tensor, boxes: Tensor, targets: GroupedTargets, groups: int = 1, *,
                 extra: Tensor | None = None, iou_order: float | None = None) -> list[list[Match]]:
        """Matches of each of ``S`` prediction sets (``[S, B, Q, ...]``) for each image: ``[S][B]``.

        With ``groups > 1`` the queries are ``groups`` consecutive blocks of ``Q / groups``, each
        matched on its own; an image's match lists every group's pairs, group 0 first.
        ``extra``: ``[S, B, Q, G]`` costs added to the class and box costs (an instance task's
        mask or keypoint costs; ``G`` = ``targets.max_count``, padding columns never read);
        ``iou_order``: DEIMv2's late-training cost instead of those (see :meth:`cost`).

        A cost that is NaN or infinite (a diverging network) is replaced by one larger than every
        finite cost of its matrix, as upstream does, and logged once: such a query is matched
        last, and the loss (which reads the same outputs) is non-finite too, so the trainer skips
        the step and stops the run if it keeps happening (``train/divergence.py``).
        """
        sets, batch, queries = logits.shape[:3]
        if groups < 1 or queries % groups:
            raise ValueError(f"{queries} queries do not split into {groups} equal groups")
        if targets.max_count == 0:
            return [[EMPTY_MATCH] * batch for _ in range(sets)]
        labels, gt_boxes, _ = targets.padded(pad_label=0)
        device = logits.device
        costs = self.cost(logits, boxes, labels.to(device, non_blocking=True),
                          gt_boxes.to(device, non_blocking=True), iou_order=iou_order)
        if extra is not None:
            costs = costs + extra.float()
        return self.solve(costs, targets.counts, groups)

    def solve(self, costs: Tensor, counts: tuple[int, ...], groups: int = 1) -> list[list[Match]]:
        """The assignments of cost matrices ``[S, B, Q, G]`` (``counts``: ground truths per image,
        the first columns of each image's matrix), one copy to the host; see ``__call__``."""
        sets, batch, queries = costs.shape[:3]
        if groups < 1 or queries % groups:
            raise ValueError(f"{queries} queries do not split into {groups} equal groups")
        if max(counts, default=0) == 0:
            return [[EMPTY_MATCH] * batch for _ in range(sets)]
        costs_np = costs.detach().float().cpu().numpy()
        per_group = queries // groups
        matches: list[list[Match]] = []
        for s in range(sets):
            row: list[Match] = []
            for b, n in enumerate(counts):
                if n == 0:
                    row.append(EMPTY_MATCH)
                    continue
                preds, gts = [], []
                for g in range(groups):
                    cost = self._finite(costs_np[s, b, g * per_group:(g + 1) * per_group, :n])
                    pred, gt = linear_sum_assignment(cost)
                    preds.append(pred.astype(np.int64) + g * per_group)
                    gts.append(gt.astype(np.int64))
                row.append((np.concatenate(preds), np.concatenate(gts)))
            matches.append(row)
        return matches

    def _finite(self, cost: np.ndarray) -> np.ndarray:
        finite = np.isfinite(cost)
        if finite.all():
            return cost
        if not self._warned:
            log.warning("Hungarian matching: %d costs are NaN or infinite (the network's outputs are: training is "
                        "diverging); matching them last", int((~finite).sum()))
            self._warned = True
        if finite.any():
            big = float(cost[finite].max() + np.abs(cost[finite]).max() + 1.0)
        else:
            big = 1.0
        return np.where(finite, cost, big)
