"""RF-DETR's set loss (eager only, never graphed): IoU-aware classification (IA-BCE), L1 and GIoU
box terms, over the last decoder layer, every earlier layer and the two-stage proposals, each
matched on its own, each query group matched on its own.

Classification (IA-BCE). For a query matched to a box of class c, the target at c is
``t = max(p**alpha * IoU**(1 - alpha), 0.01)`` (detached; p the query's own probability), and the
term is ``-t log p - (1 - t) log(1 - p)``; every other (query, class) entry is a negative weighted
by ``p**2`` (not detached, as upstream). So the score learns to track localisation quality.

Normalisation. Each term is a sum over the batch divided by ``N * G``: the ground-truth boxes
summed over all ranks, times the query groups (each group matches every box once). Each rank
reads ``N`` through ``normalizer_sum`` exactly once per call, whatever its data, and returns
``W * sum_r / max(N * G, W)``: upstream's ``sum_r / max(N * G / W, 1)``. DDP averages gradients
over the ``W`` ranks, which gives the loss of one process on the whole global batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...layers.boxes import aligned_iou, xywh_to_xyxy
from ...layers.giou import generalized_iou
from ...layers.hungarian import HungarianMatcher, Match
from ...layers.set_targets import GroupedTargets

LOSS_NAMES = ("cls", "bbox", "giou")


def pair_index(matches: list[list[Match]], offsets: list[int], device: torch.device) -> Tensor:
    """Matches ``[S][B]`` -> ``int64 [4, K]`` rows (set, image, query, ground-truth row)."""
    rows = [np.stack((np.full_like(p, s), np.full_like(p, b), p, g + offsets[b]))
            for s, per_image in enumerate(matches) for b, (p, g) in enumerate(per_image) if len(p)]
    flat = np.concatenate(rows, 1) if rows else np.zeros((4, 0), np.int64)
    return torch.from_numpy(flat).to(device, non_blocking=True)


class RFDETRLoss:
    """Matching plus the three terms (see the module docstring). Holds no parameters.

    Args:
        gains: weight of each term by name (``cls``, ``bbox``, ``giou``; RF-DETR detect: 1, 5, 2).
        alpha, gamma: IA-BCE's IoU/probability mix (0.25) and negative focusing power (2).
        matcher: the Hungarian matcher (RF-DETR's costs: class 2, L1 5, GIoU 2, exact log-sigmoid).
    """

    def __init__(self, gains: Mapping[str, float], *, alpha: float = 0.25, gamma: float = 2.0,
                 matcher: HungarianMatcher | None = None) -> None:
        missing = [name for name in LOSS_NAMES if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; RF-DETR's terms are {LOSS_NAMES}")
        self.alpha, self.gamma = alpha, gamma
        self.gains = torch.tensor([float(gains[name]) for name in LOSS_NAMES])
        self.matcher = matcher or HungarianMatcher(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0)

    def __call__(self, outputs: Mapping[str, object], targets: GroupedTargets, groups: int, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """The loss of one (rank's) batch.

        Args:
            outputs: the network's training outputs (``RFDETRNet.upstream_outputs`` in train mode).
            targets: the batch's ground truths, grouped per image.
            groups: query groups in ``outputs`` (each set's queries split evenly among them).
            normalizer_sum: this rank's box count (a 0-d float32 tensor) -> its sum over ranks.
            world_size: ranks whose gradients DDP averages.

        Returns:
            ``(total, items)``: the scalar to backward and ``float32 [3]`` detached (cls, bbox,
            giou), gains applied, summed over every supervised output.
        """
        layers: Sequence[Mapping[str, Tensor]] = [*outputs["aux_outputs"], outputs]  # type: ignore[list-item, misc]
        enc: Mapping[str, Tensor] = outputs["enc_outputs"]  # type: ignore[assignment]
        logits = torch.stack([o["pred_logits"] for o in layers]).float()
        boxes = torch.stack([o["pred_boxes"] for o in layers]).float()
        device = logits.device
        offsets = targets.offsets()
        gt_labels = targets.labels.to(device, non_blocking=True)
        gt_boxes = targets.boxes.to(device, non_blocking=True)
        terms = torch.zeros(3, device=device)
        for set_logits, set_boxes in ((logits, boxes), (enc["pred_logits"][None].float(), enc["pred_boxes"][None].float())):
            matches = self.matcher(set_logits.detach(), set_boxes.detach(), targets, groups=groups)
            pairs = pair_index(matches, offsets, device)
            terms = terms + self.terms(set_logits, set_boxes, pairs, gt_labels, gt_boxes)
        local = torch.tensor(float(targets.total * groups), device=device)
        total_boxes = normalizer_sum(local) if normalizer_sum is not None else local
        items = terms * self.gains.to(device) * (world_size / total_boxes.clamp(min=float(world_size)))
        return items.sum(), items.detach()

    def terms(self, logits: Tensor, boxes: Tensor, pairs: Tensor, gt_labels: Tensor, gt_boxes: Tensor) -> Tensor:
        """Unnormalised ``[cls, l1, giou]`` sums over ``S`` stacked sets ``[S, B, Q, ...]``; ``pairs``
        as :func:`pair_index` gives them (K may be 0: the graph stays connected)."""
        s, b, q, rows = pairs
        pred, truth = boxes[s, b, q], gt_boxes[rows]
        l1 = (pred - truth).abs().sum()
        giou = (1 - generalized_iou(xywh_to_xyxy(pred), xywh_to_xyxy(truth))).sum()
        iou = aligned_iou(xywh_to_xyxy(pred.detach()), xywh_to_xyxy(truth))
        labels = gt_labels[rows]
        prob = logits.sigmoid()
        index = (s, b, q, labels)
        target = (prob[index].detach().pow(self.alpha) * iou.pow(1 - self.alpha)).clamp(min=0.01)
        positive = torch.zeros_like(logits).index_put(index, target)
        negative = prob.pow(self.gamma).index_put(index, 1 - target)
        cls = (negative * logits - F.logsigmoid(logits) * (positive + negative)).sum()
        return torch.stack((cls, l1, giou))
