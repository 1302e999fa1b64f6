"""RT-DETR's set loss: varifocal classification, L1 and GIoU box terms, over every decoder layer,
the encoder's top-k outputs and the denoising queries (eager only, never graphed).

Normalisation. Each term is a sum over the batch divided by ``N``, the number of ground-truth
boxes summed over all ranks (denoising terms by ``N * groups``: each group repeats every box).
Each rank reads ``N`` through ``normalizer_sum`` exactly once per call, whatever its data (so the
all-reduces line up on every rank, even on a rank without boxes), and returns
``W * sum_r / N``; DDP averages gradients over the ``W`` ranks, which gives
``sum over ranks / N``: the loss of one process on the whole global batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from ..hungarian import EPS_LOG, HungarianMatcher
from ..set_targets import GroupedTargets
from .denoising import DenoisingQueries
from .set_terms import box_terms, denoising_matches, matched_iou, pair_index, varifocal

LOSS_NAMES = ("vfl", "bbox", "giou")


class RTDETRLoss:
    """Matching plus the three terms (see the module docstring). Holds no parameters.

    Args:
        nc: classes.
        gains: weight of each term by name (``vfl``, ``bbox``, ``giou``; RT-DETR: 1, 5, 2).
        alpha, gamma: varifocal weighting of negatives (``alpha * p**gamma``; 0.75, 2).
        matcher: the Hungarian matcher (RT-DETR's costs by default).
    """

    def __init__(self, nc: int, gains: Mapping[str, float], *, alpha: float = 0.75, gamma: float = 2.0,
                 matcher: HungarianMatcher | None = None) -> None:
        missing = [name for name in LOSS_NAMES if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; RT-DETR's terms are {LOSS_NAMES}")
        self.nc, self.alpha, self.gamma = nc, alpha, gamma
        self.gains = torch.tensor([float(gains[name]) for name in LOSS_NAMES])
        self.matcher = matcher or HungarianMatcher(log_eps=EPS_LOG)

    def __call__(self, outputs: Mapping[str, Tensor], targets: GroupedTargets, denoising: DenoisingQueries, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """The loss of one (rank's) batch.

        Args:
            outputs: the decoder's training outputs (``RTDETRDecoder.forward_train``).
            targets: the batch's ground truths, grouped per image.
            denoising: the batch's denoising queries (their layout gives the denoising matches).
            normalizer_sum: this rank's box count (a 0-d float32 tensor) -> its sum over ranks.
            world_size: ranks whose gradients DDP averages.

        Returns:
            ``(total, items)``: the scalar to backward and ``float32 [3]`` detached (vfl, bbox,
            giou), gains applied, summed over every supervised output.
        """
        logits = torch.cat((outputs["logits"], outputs["enc_logits"][None])).float()
        boxes = torch.cat((outputs["boxes"], outputs["enc_boxes"][None])).float()
        device = logits.device
        offsets = targets.offsets()
        gt_labels = targets.labels.to(device, non_blocking=True)
        gt_boxes = targets.boxes.to(device, non_blocking=True)
        matches = self.matcher(logits.detach(), boxes.detach(), targets)
        main = self._terms(logits, boxes, pair_index(matches, offsets, device), gt_labels, gt_boxes)
        dn_logits, dn_boxes = outputs["dn_logits"].float(), outputs["dn_boxes"].float()
        dn_pairs = pair_index([denoising_matches(denoising)] * dn_logits.shape[0], offsets, device)
        dn = self._terms(dn_logits, dn_boxes, dn_pairs, gt_labels, gt_boxes) / max(denoising.groups, 1)
        local = torch.tensor(float(targets.total), device=device)
        total_boxes = normalizer_sum(local) if normalizer_sum is not None else local
        items = (main + dn) * self.gains.to(device) * (world_size / total_boxes.clamp(min=1.0))
        return items.sum(), items.detach()

    def _terms(self, logits: Tensor, boxes: Tensor, index: Tensor, gt_labels: Tensor, gt_boxes: Tensor) -> Tensor:
        """Unnormalised ``[vfl, l1, giou]`` sums over ``S`` stacked sets ``[S, B, Q, ...]`` and their
        matches ``index [4, K]`` (``set_terms``; K may be 0: the graph stays connected)."""
        l1, giou = box_terms(boxes, index, gt_boxes)
        iou = matched_iou(boxes, index, gt_boxes)
        vfl = varifocal(logits, iou, index, gt_labels[index[3]], alpha=self.alpha, gamma=self.gamma)
        return torch.stack((vfl, l1, giou))
