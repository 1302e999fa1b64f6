"""D-FINE's set loss (also DEIM's, RT-DETRv4's and DEIMv2's): a classification term (varifocal,
or DEIM's matchability-aware loss), L1 and GIoU box terms, fine-grained localisation (FGL) and
decoupled distillation (DDF) over the distribution bins; over every decoder layer, layer 0's
plain prediction, the encoder's top-k and the denoising queries (eager only, never graphed).

- Matching: each prediction set is matched on its own (Hungarian) for its classification term.
  The box terms and FGL use the union of all sets' matches (each query keeps the ground truth
  most sets gave it: "GO-LSD"), so every layer learns boxes for every query any layer found.
- FGL: cross-entropy of each matched edge's distribution against the two bins around the true
  offset, weighted by the bins' closeness and by the query's IoU.
- DDF: each earlier layer's distributions are distilled (KL at temperature 5) towards the last
  layer's, weighted by the last layer's confidence (by the IoU on matched queries); matched and
  unmatched queries are averaged separately and mixed by the square roots of their counts.

Normalisation. Classification terms divide by ``N``, the ground-truth boxes, box terms and FGL by
the union's match count; both are summed over ranks through ``normalizer_sum`` (one call with
both) and divided by the world size (at least 1 each), as upstream does: DDP's gradient average
then gives the loss of the global batch. Denoising terms divide by ``N * groups``. DDF is a mean
(not normalised by a count).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..boxes import xywh_to_xyxy
from ..hungarian import EPS_LOG, HungarianMatcher, Match
from ..set_targets import GroupedTargets
from .denoising import DenoisingQueries
from .fdr import bbox2distance
from .set_terms import (
    box_terms,
    denoising_matches,
    matchability_aware,
    matched_iou,
    pair_index,
    varifocal,
)

DISTILL_TEMPERATURE = 5.0
DDF_BATCH_SCALE = 8.0  # upstream's reference batch for the matched/unmatched mixing weights
IOU_ORDER = 4.0        # DEIMv2's late matching cost: -p * IoU**4


def union_matches(sets: list[list[Match]]) -> list[Match]:
    """Per image, every (query, ground truth) pair any set matched, each query kept once: with the
    ground truth most sets gave it (ties: the lower ground-truth index)."""
    out: list[Match] = []
    for per_set in zip(*sets):
        pairs = np.concatenate([np.stack(m) for m in per_set], 1) if per_set else np.zeros((2, 0), np.int64)
        if pairs.shape[1] == 0:
            out.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
            continue
        unique, counts = np.unique(pairs, axis=1, return_counts=True)
        order = np.lexsort((unique[1], unique[0], -counts))   # most votes first, then query, then gt
        ranked = unique[:, order]
        _, first = np.unique(ranked[0], return_index=True)     # each query's best-ranked pair
        out.append((ranked[0, first].astype(np.int64), ranked[1, first].astype(np.int64)))
    return out


class FDRLoss:
    """The terms of the module docstring. Holds no parameters.

    Args:
        nc: classes.
        gains: weight of each term by name (``cls_name``, ``bbox``, ``giou``, ``fgl``, ``ddf``).
        cls_term: ``"vfl"`` (D-FINE) or ``"mal"`` (DEIM, RT-DETRv4, DEIMv2).
        alpha, gamma: the classification term's weighting (D-FINE 0.75, 2; DEIM 0.75, 1.5).
        local: FGL and DDF on (off for DEIMv2's smallest sizes: their terms are then 0).
        union: box terms on the union of all sets' matches (else each set's own).
        matcher: the Hungarian matcher (costs 2, 5, 2 by default).
        iou_order_from: DEIMv2: from this share of the run on (``progress``), match by
            ``-p * IoU**4`` instead of the weighted cost.
    """

    def __init__(self, nc: int, gains: Mapping[str, float], *, cls_term: Literal["vfl", "mal"] = "vfl",
                 alpha: float = 0.75, gamma: float = 2.0, reg_max: int = 32, local: bool = True, union: bool = True,
                 matcher: HungarianMatcher | None = None, iou_order_from: float | None = None) -> None:
        self.names = (cls_term, "bbox", "giou", "fgl", "ddf")
        missing = [name for name in self.names if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; the terms are {self.names}")
        self.nc, self.cls_term, self.alpha, self.gamma, self.reg_max = nc, cls_term, alpha, gamma, reg_max
        self.local, self.union, self.iou_order_from = local, union, iou_order_from
        self.gains = torch.tensor([float(gains[name]) for name in self.names])
        self.matcher = matcher or HungarianMatcher(log_eps=EPS_LOG)

    def __call__(self, outputs: Mapping[str, Tensor], targets: GroupedTargets, denoising: DenoisingQueries, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1,
                 progress: float = 0.0) -> tuple[Tensor, Tensor]:
        """The loss of one (rank's) batch: ``(total, items [5] detached)``, gains applied.

        ``outputs``: ``FDRDecoder.forward_train``'s; ``targets``/``denoising``: the batch's;
        ``progress``: the share of the run done (epoch / epochs).
        """
        layers = outputs["logits"].shape[0]
        logits = torch.cat((outputs["logits"], outputs["pre_logits"][None], outputs["enc_logits"][None])).float()
        boxes = torch.cat((outputs["boxes"], outputs["pre_boxes"][None], outputs["enc_boxes"][None])).float()
        device = logits.device
        offsets = targets.offsets()
        gt_labels = targets.labels.to(device, non_blocking=True)
        gt_boxes = targets.boxes.to(device, non_blocking=True)
        late = self.iou_order_from is not None and progress >= self.iou_order_from
        own = self.matcher(logits.detach(), boxes.detach(), targets, iou_order=IOU_ORDER if late else None)
        union = union_matches(own) if self.union else None
        box_sets = [union] * len(own) if union is not None else own
        matched = sum(len(p) for p, _ in union) if union is not None else targets.total
        counts = torch.tensor([float(targets.total), float(matched)], device=device)
        summed = normalizer_sum(counts) if normalizer_sum is not None else counts
        num_boxes, num_union = (summed / world_size).clamp(min=1.0).unbind()

        cls_index = pair_index(own, offsets, device)
        box_index = pair_index(box_sets, offsets, device)
        cls = self._cls(logits, boxes, cls_index, gt_labels, gt_boxes) / num_boxes
        l1, giou = box_terms(boxes, box_index, gt_boxes)
        terms = [cls, l1 / num_union, giou / num_union]
        layer_index = pair_index(box_sets[:layers], offsets, device)
        mixing = self._mixing(box_sets[layers - 1], outputs["logits"].shape[1:3])
        terms += self._local(outputs["corners"], outputs["boxes"], outputs["logits"], outputs["refs"], layer_index,
                             gt_boxes, outputs, mixing, num_union)

        # Denoising: every layer and layer 0's plain prediction, matched by construction.
        dn_logits = torch.cat((outputs["dn_logits"], outputs["dn_pre_logits"][None])).float()
        dn_boxes = torch.cat((outputs["dn_boxes"], outputs["dn_pre_boxes"][None])).float()
        dn = [denoising_matches(denoising)]
        num_dn = num_boxes * max(denoising.groups, 1)
        dn_all = pair_index(dn * (layers + 1), offsets, device)
        dn_l1, dn_giou = box_terms(dn_boxes, dn_all, gt_boxes)
        dn_terms = [self._cls(dn_logits, dn_boxes, dn_all, gt_labels, gt_boxes) / num_dn, dn_l1 / num_dn,
                    dn_giou / num_dn]
        dn_terms += self._local(outputs["dn_corners"], outputs["dn_boxes"], outputs["dn_logits"], outputs["dn_refs"],
                                pair_index(dn * layers, offsets, device), gt_boxes, outputs, mixing, num_dn)
        items = (torch.stack(terms) + torch.stack(dn_terms)) * self.gains.to(device)
        return items.sum(), items.detach()

    def _cls(self, logits: Tensor, boxes: Tensor, index: Tensor, gt_labels: Tensor, gt_boxes: Tensor) -> Tensor:
        iou = matched_iou(boxes, index, gt_boxes)
        labels = gt_labels[index[3]]
        if self.cls_term == "mal":
            return matchability_aware(logits, iou, index, labels, gamma=self.gamma)
        return varifocal(logits, iou, index, labels, alpha=self.alpha, gamma=self.gamma)

    @staticmethod
    def _mixing(last: list[Match], batch_queries: torch.Size) -> tuple[float, float]:
        """DDF's weights of matched and unmatched queries: square roots of their edge counts,
        scaled to upstream's reference batch (host numbers from the matches: no device sync)."""
        b, q = int(batch_queries[0]), int(batch_queries[1])
        matched = 4 * sum(len(p) for p, _ in last)
        scale = DDF_BATCH_SCALE / max(b, 1)
        return (matched * scale) ** 0.5, ((4 * b * q - matched) * scale) ** 0.5

    def _local(self, corners: Tensor, boxes: Tensor, logits: Tensor, refs: Tensor, index: Tensor, gt_boxes: Tensor,
               outputs: Mapping[str, Tensor], mixing: tuple[float, float], count: Tensor) -> list[Tensor]:
        """``[fgl, ddf]`` over the decoder layers' distributions ``corners [L, B, Q, 4 * (R + 1)]``."""
        zero = corners.sum() * 0.0  # keeps the graph connected when a term is off or empty
        if not self.local:
            return [zero, zero]
        bins = self.reg_max + 1
        corners, boxes = corners.float(), boxes.float()
        up, reg_scale = outputs["up"].float(), outputs["reg_scale"].float()
        ref = refs.detach().float()[index[1], index[2]]
        truth = xywh_to_xyxy(gt_boxes[index[3]])
        target, right, left = bbox2distance(ref, truth, self.reg_max, reg_scale, up)
        iou = matched_iou(boxes, index, gt_boxes)
        pred = corners[index[0], index[1], index[2]].reshape(-1, bins)
        left_bin = target.long()
        fgl = (F.cross_entropy(pred, left_bin, reduction="none") * left
               + F.cross_entropy(pred, left_bin + 1, reduction="none") * right)
        fgl = (fgl * iou.repeat_interleave(4)).sum() / count
        return [fgl, zero + self._distill(corners, logits.float(), boxes, index, iou, mixing)]

    @staticmethod
    def _distill(corners: Tensor, logits: Tensor, boxes: Tensor, index: Tensor, iou: Tensor,
                 mixing: tuple[float, float]) -> Tensor:
        """DDF summed over layers ``0..L-2``, each distilled towards layer ``L-1`` (detached)."""
        layers, b, q, width = corners.shape
        if layers < 2:
            return corners.sum() * 0.0
        t = DISTILL_TEMPERATURE
        teacher = F.softmax(corners[-1].detach().reshape(-1, 4, width // 4) / t, dim=-1)
        confidence = logits[-1].detach().sigmoid().max(-1).values             # [B, Q]
        total = corners.sum() * 0.0
        pos_weight, neg_weight = mixing
        for s in range(layers - 1):
            mine = index[0] == s
            matched = torch.zeros(b, q, dtype=torch.bool, device=corners.device)
            matched[index[1][mine], index[2][mine]] = True
            weight = confidence.clone()
            weight[index[1][mine], index[2][mine]] = iou[mine].to(weight.dtype)
            student = F.log_softmax(corners[s].reshape(-1, 4, width // 4) / t, dim=-1)
            kl = F.kl_div(student, teacher, reduction="none").sum(-1) * (t * t) * weight.reshape(-1, 1)  # [B*Q, 4]
            mask = matched.reshape(-1, 1).expand_as(kl)
            pos = (kl * mask).sum() / mask.sum().clamp(min=1)
            neg = (kl * ~mask).sum() / (~mask).sum().clamp(min=1)
            total = total + (pos * pos_weight + neg * neg_weight) / (pos_weight + neg_weight)
        return total
