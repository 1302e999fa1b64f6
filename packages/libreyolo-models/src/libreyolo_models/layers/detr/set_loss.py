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
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..boxes import aligned_iou, xywh_to_xyxy
from .denoising import DenoisingQueries
from .giou import generalized_iou
from .matcher import HungarianMatcher, Match
from .targets import GroupedTargets

LOSS_NAMES = ("vfl", "bbox", "giou")


@dataclass(frozen=True)
class _Pairs:
    """Matched (set, image, query) -> ground-truth row pairs, as one ``int64 [4, K]`` tensor."""

    index: Tensor

    @classmethod
    def build(cls, matches: list[list[Match]], offsets: list[int], device: torch.device) -> _Pairs:
        rows = [np.stack((np.full_like(p, s), np.full_like(p, b), p, g + offsets[b]))
                for s, per_image in enumerate(matches) for b, (p, g) in enumerate(per_image) if len(p)]
        flat = np.concatenate(rows, 1) if rows else np.zeros((4, 0), np.int64)
        return cls(torch.from_numpy(flat).to(device, non_blocking=True))


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
        self.matcher = matcher or HungarianMatcher()

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
        main = self._terms(logits, boxes, _Pairs.build(matches, offsets, device), gt_labels, gt_boxes)
        dn_logits, dn_boxes = outputs["dn_logits"].float(), outputs["dn_boxes"].float()
        dn_pairs = _Pairs.build(self._denoising_matches(denoising, dn_logits.shape[0]), offsets, device)
        dn = self._terms(dn_logits, dn_boxes, dn_pairs, gt_labels, gt_boxes) / max(denoising.groups, 1)
        local = torch.tensor(float(targets.total), device=device)
        total_boxes = normalizer_sum(local) if normalizer_sum is not None else local
        items = (main + dn) * self.gains.to(device) * (world_size / total_boxes.clamp(min=1.0))
        return items.sum(), items.detach()

    @staticmethod
    def _denoising_matches(denoising: DenoisingQueries, layers: int) -> list[list[Match]]:
        """Each image's positive copies answer its ground truths by construction (no matching)."""
        per_image = []
        for b, n in enumerate(denoising.counts):
            if n == 0 or denoising.groups == 0:
                per_image.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
            else:
                per_image.append((denoising.positive_slots(b).numpy(), np.tile(np.arange(n), denoising.groups)))
        return [per_image] * layers

    def _terms(self, logits: Tensor, boxes: Tensor, pairs: _Pairs, gt_labels: Tensor, gt_boxes: Tensor) -> Tensor:
        """Unnormalised ``[vfl, l1, giou]`` sums over ``S`` stacked sets ``[S, B, Q, ...]``.

        Varifocal: a matched query's target at its ground-truth class is its (detached) IoU with
        that box, everything else 0; positives are weighted by that target, negatives by
        ``alpha * p**gamma``, so easy background fades and the score learns localisation quality.
        """
        s, b, q = pairs.index[0], pairs.index[1], pairs.index[2]
        rows = pairs.index[3]
        pred = xywh_to_xyxy(boxes[s, b, q])     # [K, 4]; K may be 0 (the graph stays connected)
        truth = xywh_to_xyxy(gt_boxes[rows])
        labels = gt_labels[rows]
        l1 = (boxes[s, b, q] - gt_boxes[rows]).abs().sum()
        giou = (1 - generalized_iou(pred, truth)).sum()
        iou = aligned_iou(pred.detach(), truth).to(logits.dtype)
        target = torch.zeros_like(logits).index_put_((s, b, q, labels), iou)
        positive = torch.zeros_like(logits, dtype=torch.bool).index_put_(
            (s, b, q, labels), torch.ones_like(labels, dtype=torch.bool))
        prob = logits.detach().sigmoid()
        weight = torch.where(positive, target, self.alpha * prob.pow(self.gamma))
        vfl = F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum")
        return torch.stack((vfl, l1, giou))
