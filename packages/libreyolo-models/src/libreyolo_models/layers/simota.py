"""SimOTA label assignment (YOLOX) for anchor-point detectors, batched (eager only: never graphed).

For each ground truth:

1. Centre prior: the candidate anchors are those whose centre lies within ``radius`` strides of the
   ground truth's centre (strictly, on both axes). Anchors that are nobody's candidate are out of
   the assignment altogether.
2. Cost of every (ground truth, candidate anchor) pair: the classification cost (binary
   cross-entropy of the anchor's joint score ``sqrt(sigmoid(cls) * sigmoid(obj))`` against the
   one-hot class), plus 3 x the IoU cost ``-log(IoU + 1e-8)`` of the anchor's predicted box, plus
   a large penalty (1e6) when the anchor is outside this ground truth's own centre region.
3. Dynamic k: the sum of the ground truth's 10 best IoUs over the candidates, truncated, at least 1.
   The k cheapest anchors are its positives.
4. An anchor picked by several ground truths goes to the one with the lowest cost.

A ground truth with no anchor at all in its centre region (its centre lies far outside the image)
gets no positive and takes none from the others. (Upstream would hand it anchors from other ground
truths' regions at the penalty cost; with labels clipped to the image this never happens.)

``region="box_or_centre"`` is the original (mmdetection / PicoDet) geometry instead: an anchor is
a candidate when its centre lies inside some ground truth's box *or* centre region, and the
penalty applies unless it lies inside this ground truth's box *and* centre region. A ground truth
whose box and centre region hold no anchor centre gets no positive, as above.

The whole batch is one set of tensor operations over padded ground truths ``[B, G]`` and anchors
``[A]``: no per-image Python loop, no ``.item()``, no boolean-mask selection, nothing the host
waits for. Memory is a few ``[B, G, A]`` tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import ConfigError
from .assign import anchors_inside_boxes
from .boxes import aligned_iou, xywh_to_xyxy

OUTSIDE_PENALTY = 1e6  # added to the cost of an anchor outside the ground truth's centre region
LOG_FLOOR = -100.0     # binary cross-entropy clamps its logs here (as torch's does)


@dataclass(frozen=True)
class SimOTAAssignment:
    """Per-anchor training targets for ``B`` images and ``A`` anchors.

    Attributes:
        foreground: ``[B, A]`` bool, True where an anchor was given a ground truth.
        gt_index: ``[B, A]`` int64 column of the assigned ground truth (meaningless on background).
        labels: ``[B, A]`` int64 class of the assigned ground truth (meaningless on background).
        boxes: ``[B, A, 4]`` its box, cx/cy/w/h in the ground truths' units (meaningless on
            background).
        ious: ``[B, A]`` IoU of the anchor's predicted box with its ground truth (0 on background):
            the soft class target.
        num_foreground: 0-d float tensor, the number of positives in the batch (on the device).
    """

    foreground: Tensor
    gt_index: Tensor
    labels: Tensor
    boxes: Tensor
    ious: Tensor
    num_foreground: Tensor


class SimOTAAssigner:
    """Assign padded ground truths to the anchors of a batch (see the module docstring).

    Args:
        radius: half-size of the centre region, in strides of the anchor's level (1.5 as upstream).
        candidates_k: IoUs summed for the dynamic k (10 as upstream).
        iou_weight: weight of the IoU cost against the classification cost (3.0 as upstream YOLOX;
            PicoDet: 6.0).
        region: ``"centre"`` (YOLOX: centre regions only) or ``"box_or_centre"`` (PicoDet, the
            original SimOTA: boxes or centre regions; see the module docstring).
        score_eps: scores are clamped to ``[score_eps, 1 - score_eps]`` before the classification
            cost (PicoDet: 1e-7); 0 keeps them and floors the logs at -100 instead.
    """

    def __init__(self, *, radius: float = 1.5, candidates_k: int = 10, iou_weight: float = 3.0,
                 region: Literal["centre", "box_or_centre"] = "centre", score_eps: float = 0.0) -> None:
        if region not in ("centre", "box_or_centre"):
            raise ConfigError(f"region={region!r}: use 'centre' (YOLOX) or 'box_or_centre' (PicoDet)")
        if not 0.0 <= score_eps < 0.5:
            raise ConfigError(f"score_eps={score_eps} must be in [0, 0.5): the scores' clamp margin (PicoDet: 1e-7)")
        self.region, self.score_eps = region, score_eps
        if radius <= 0:
            raise ConfigError(f"radius={radius} must be > 0 (centre region half-size in strides); 1.5 is upstream's")
        if candidates_k < 1:
            raise ConfigError(f"candidates_k={candidates_k} must be >= 1 (IoUs summed for the dynamic k); 10 is "
                              "upstream's")
        self.radius, self.candidates_k, self.iou_weight = radius, candidates_k, iou_weight

    @torch.no_grad()
    def __call__(self, pred_scores: Tensor, pred_boxes: Tensor, anchor_centres: Tensor, anchor_strides: Tensor,
                 gt_labels: Tensor, gt_boxes: Tensor, gt_mask: Tensor) -> SimOTAAssignment:
        """Assign a batch.

        Args:
            pred_scores: ``[B, A, C]`` joint class scores in [0, 1] (YOLOX: ``sqrt(cls * obj)``
                after sigmoids).
            pred_boxes: ``[B, A, 4]`` predicted boxes, cx/cy/w/h, same units as ``gt_boxes``.
            anchor_centres: ``[A, 2]`` anchor cell centres (x, y), same units.
            anchor_strides: ``[A]`` or ``[A, 1]`` stride of each anchor's level, same units.
            gt_labels: ``[B, G]`` integer classes in [0, C) (padding columns may hold any valid class).
            gt_boxes: ``[B, G, 4]`` ground-truth boxes, cx/cy/w/h.
            gt_mask: ``[B, G]`` bool, False on padding columns.
        """
        b, a, c = pred_scores.shape
        if pred_boxes.shape != (b, a, 4) or anchor_centres.shape != (a, 2) or anchor_strides.numel() != a:
            raise ValueError(f"pred_boxes {tuple(pred_boxes.shape)}, anchor_centres {tuple(anchor_centres.shape)} "
                             f"and anchor_strides {tuple(anchor_strides.shape)} must be [{b}, {a}, 4], [{a}, 2] "
                             f"and [{a}] to match pred_scores {tuple(pred_scores.shape)}")
        if gt_boxes.shape[1] == 0:  # shape only, known on the host: one masked column keeps the code path
            gt_labels, gt_boxes, gt_mask = gt_labels.new_zeros(b, 1), gt_boxes.new_zeros(b, 1, 4), gt_mask.new_zeros(b, 1)
        labels = gt_labels.long()
        in_region, cost_free = self._regions(anchor_centres, anchor_strides.reshape(a), gt_boxes)
        in_region, cost_free = in_region & gt_mask[..., None], cost_free & gt_mask[..., None]
        candidate = in_region.sum(1) > 0  # [B, A]; not .any(): it synchronised on CUDA (pytorch#84291)
        usable = candidate[:, None, :] & gt_mask[..., None]  # [B, G, A]
        iou = aligned_iou(xywh_to_xyxy(gt_boxes)[:, :, None], xywh_to_xyxy(pred_boxes)[:, None]) * usable
        scores = pred_scores.float()
        if self.score_eps:
            scores = scores.clamp(self.score_eps, 1.0 - self.score_eps)
        cost = self._classification_cost(scores, labels) + self.iou_weight * -torch.log(iou + 1e-8)
        cost = cost + OUTSIDE_PENALTY * (~cost_free)
        cost = cost.masked_fill(~usable, float("inf"))
        dynamic_k = self._dynamic_k(iou, has_centre=in_region.sum(-1) > 0)
        chosen = self._cheapest(cost, dynamic_k) & usable
        gt_index, foreground = self._resolve_conflicts(chosen, cost)
        matched_iou = iou.gather(1, gt_index[:, None]).squeeze(1) * foreground
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(b, a, 4))
        return SimOTAAssignment(foreground, gt_index, labels.gather(1, gt_index), boxes, matched_iou,
                                foreground.sum().float())

    def _regions(self, centres: Tensor, strides: Tensor, gt_boxes: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, G, A]`` twice: where an anchor is a candidate of a gt, and where it costs no penalty."""
        in_centre = self._centre_prior(centres, strides, gt_boxes)
        if self.region == "centre":
            return in_centre, in_centre
        in_box = anchors_inside_boxes(centres, xywh_to_xyxy(gt_boxes), eps=0.0)
        return in_box | in_centre, in_box & in_centre

    def _centre_prior(self, centres: Tensor, strides: Tensor, gt_boxes: Tensor) -> Tensor:
        """``[B, G, A]``: the anchor centre lies strictly within ``radius`` strides of the gt centre."""
        reach = self.radius * strides  # [A]
        dx = (centres[:, 0] - gt_boxes[..., 0, None]).abs()
        dy = (centres[:, 1] - gt_boxes[..., 1, None]).abs()
        return (reach - torch.maximum(dx, dy)) > 0.0

    @staticmethod
    def _classification_cost(scores: Tensor, labels: Tensor) -> Tensor:
        """``[B, G, A]``: BCE of each anchor's scores against each gt's one-hot class, summed over classes.

        Computed as (the cost of saying "no" to every class) + (the change for the gt's own class),
        so no ``[B, G, A, C]`` tensor is ever built.
        """
        log_p = scores.log().clamp(min=LOG_FLOOR)
        log_not_p = torch.log1p(-scores).clamp(min=LOG_FLOOR)
        all_negative = -log_not_p.sum(-1)  # [B, A]
        index = labels[:, None, :].expand(-1, scores.shape[1], -1)  # [B, A, G]
        own = (log_not_p.gather(2, index) - log_p.gather(2, index)).transpose(1, 2)  # [B, G, A]
        return all_negative[:, None, :] + own

    def _dynamic_k(self, iou: Tensor, has_centre: Tensor) -> Tensor:
        """``[B, G]`` positives per gt: its top IoUs summed, truncated, at least 1 (0 without a centre anchor)."""
        top = iou.topk(min(self.candidates_k, iou.shape[-1]), dim=-1).values.sum(-1)
        return torch.where(has_centre, top.long().clamp(min=1), torch.zeros_like(top, dtype=torch.long))

    def _cheapest(self, cost: Tensor, dynamic_k: Tensor) -> Tensor:
        """``[B, G, A]`` bool: each gt's ``dynamic_k`` cheapest anchors.

        One ``topk`` of the largest possible k (the dynamic k never exceeds ``candidates_k``: it
        is a sum of that many IoUs), then a rank mask keeps each row's own k.
        """
        k_max = min(self.candidates_k, cost.shape[-1])
        order = cost.topk(k_max, dim=-1, largest=False).indices  # [B, G, k_max]
        keep = torch.arange(k_max, device=cost.device) < dynamic_k[..., None]
        return torch.zeros_like(cost, dtype=torch.bool).scatter_(-1, order, keep)

    @staticmethod
    def _resolve_conflicts(chosen: Tensor, cost: Tensor) -> tuple[Tensor, Tensor]:
        """One gt per anchor: the one that chose it, or the cheapest of all gts when several did."""
        count = chosen.sum(1)  # [B, A]
        only = chosen.to(torch.uint8).argmax(1)
        gt_index = torch.where(count > 1, cost.argmin(1), only)
        return gt_index, count > 0
