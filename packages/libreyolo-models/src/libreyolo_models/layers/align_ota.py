"""AlignOTA label assignment (DAMO-YOLO), batched (eager only: never graphed).

SimOTA's dynamic-k matching with a quality-focal classification cost, as DAMO-YOLO's
``AlignOTAAssigner`` (tinyvision/DAMO-YOLO, ported by upstream LibreYOLO) defines it, per image:

1. Candidates ("valid" priors): those lying strictly inside some ground truth, or strictly within
   ``center_radius`` strides of some ground truth's centre (on both axes). Other priors take no
   part. A (ground truth, prior) pair inside both that ground truth's box and its centre region
   costs nothing extra; every other pair pays ``INF_COST``.
2. Cost of a pair: ``cls_weight`` x the quality-focal cost of the prior's class scores against the
   soft label "IoU on the ground truth's class, 0 elsewhere" (``BCE(p, soft) * |soft - p|^2``
   summed over classes), plus ``iou_weight`` x ``-log(IoU + 1e-7)`` of the prior's predicted box.
3. Dynamic k: the sum of the ground truth's ``candidate_topk`` best IoUs over the candidates,
   truncated, at least 1. Each ground truth takes its k cheapest candidates.
4. A prior taken by several ground truths keeps the cheapest of all the image's ground truths.

The soft target of a positive is its IoU with its ground truth. Everything is one set of tensor
operations over padded ground truths ``[B, G]`` and priors ``[A]``: no loop over images or ground
truths, no ``.item()``, no boolean-mask selection. An image whose ground truths have no candidate
at all gets no positive (upstream returns early the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .boxes import wh_area

INF_COST = 1e8        # added to pairs outside the ground truth's box-and-centre region (upstream's INF)
IOU_EPS = 1e-6        # upstream's bbox_overlaps floor on the union
LOG_EPS = 1e-7        # upstream's -log(IoU + eps)
LOG_FLOOR = -100.0    # binary cross-entropy clamps its logs here (as torch's does)


@dataclass(frozen=True)
class AlignOTAAssignment:
    """Per-prior targets for ``B`` images and ``A`` priors.

    Attributes:
        foreground: ``[B, A]`` bool, True where a prior was given a ground truth.
        gt_index: ``[B, A]`` int64 column of its ground truth in the padded inputs (0 on background).
        labels: ``[B, A]`` int64 class of that ground truth (meaningless on background).
        boxes: ``[B, A, 4]`` its xyxy box (meaningless on background).
        ious: ``[B, A]`` IoU of the prior's predicted box with its ground truth (0 on background):
            the quality-focal soft target.
    """

    foreground: Tensor
    gt_index: Tensor
    labels: Tensor
    boxes: Tensor
    ious: Tensor


def pairwise_iou(gt_boxes: Tensor, pred_boxes: Tensor) -> Tensor:
    """``[B, G, 4]`` x ``[B, A, 4]`` xyxy -> ``[B, G, A]`` IoU, union floored at ``IOU_EPS``."""
    a, b = gt_boxes[:, :, None], pred_boxes[:, None]
    inter = wh_area((torch.minimum(a[..., 2:], b[..., 2:]) - torch.maximum(a[..., :2], b[..., :2])).clamp(min=0))
    area_a = wh_area(a[..., 2:] - a[..., :2])
    area_b = wh_area(b[..., 2:] - b[..., :2])
    return inter / (area_a + area_b - inter).clamp(min=IOU_EPS)


class AlignOTAAssigner:
    """Assign padded ground truths to the priors of a batch (see the module docstring).

    Args:
        center_radius: half-size of the centre region, in strides of the prior's level (2.5).
        candidate_topk: IoUs summed for the dynamic k (10).
        iou_weight, cls_weight: weights of the IoU and classification costs (3.0 and 1.0).
    """

    def __init__(self, *, center_radius: float = 2.5, candidate_topk: int = 10, iou_weight: float = 3.0,
                 cls_weight: float = 1.0) -> None:
        if center_radius <= 0:
            raise ConfigError(f"center_radius={center_radius} must be > 0 (strides); DAMO-YOLO uses 2.5")
        if candidate_topk < 1:
            raise ConfigError(f"candidate_topk={candidate_topk} must be >= 1; DAMO-YOLO uses 10")
        self.center_radius, self.candidate_topk = center_radius, candidate_topk
        self.iou_weight, self.cls_weight = iou_weight, cls_weight

    @torch.no_grad()
    def __call__(self, pred_scores: Tensor, pred_boxes: Tensor, priors: Tensor, prior_strides: Tensor,
                 gt_labels: Tensor, gt_boxes: Tensor, gt_mask: Tensor) -> AlignOTAAssignment:
        """Assign a batch.

        Args:
            pred_scores: ``[B, A, C]`` class probabilities (after sigmoid).
            pred_boxes: ``[B, A, 4]`` predicted xyxy boxes, same units as ``gt_boxes``.
            priors: ``[A, 2]`` prior points (x, y), same units (DAMO-YOLO: cell corners).
            prior_strides: ``[A]`` or ``[A, 1]`` stride of each prior's level, same units.
            gt_labels: ``[B, G]`` integer classes in [0, C) (padding columns may hold any valid class).
            gt_boxes: ``[B, G, 4]`` xyxy ground truths; gt_mask: ``[B, G]`` bool, False on padding.
        """
        b, a, _ = pred_scores.shape
        if pred_boxes.shape != (b, a, 4) or priors.shape != (a, 2) or prior_strides.numel() != a:
            raise ValueError(f"pred_boxes {tuple(pred_boxes.shape)}, priors {tuple(priors.shape)} and prior_strides "
                             f"{tuple(prior_strides.shape)} must be [{b}, {a}, 4], [{a}, 2] and [{a}] to match "
                             f"pred_scores {tuple(pred_scores.shape)}")
        if gt_boxes.shape[1] == 0:  # shape only, known on the host: one masked column keeps the code path
            gt_labels, gt_boxes, gt_mask = gt_labels.new_zeros(b, 1), gt_boxes.new_zeros(b, 1, 4), gt_mask.new_zeros(b, 1)
        labels = gt_labels.long()
        in_box, in_centre = self._regions(priors, prior_strides.reshape(a), gt_boxes)
        in_box, in_centre = in_box & gt_mask[..., None], in_centre & gt_mask[..., None]
        valid = ((in_box | in_centre).sum(1) > 0)  # [B, A]; not .any(): it synchronised on CUDA (pytorch#84291)
        usable = valid[:, None, :] & gt_mask[..., None]  # [B, G, A]
        iou = pairwise_iou(gt_boxes.float(), pred_boxes.float()) * usable
        cost = (self.cls_weight * self._classification_cost(pred_scores.float(), labels, iou)
                + self.iou_weight * -torch.log(iou + LOG_EPS) + INF_COST * ~(in_box & in_centre))
        cost = cost.masked_fill(~usable, float("inf"))
        top = iou.topk(min(self.candidate_topk, a), dim=-1).values.sum(-1)
        has_candidate = usable.sum(-1) > 0  # [B, G]
        dynamic_k = torch.where(has_candidate, top.long().clamp(min=1), torch.zeros_like(top, dtype=torch.long))
        chosen = self._cheapest(cost, dynamic_k) & usable
        count = chosen.sum(1)  # [B, A]
        gt_index = torch.where(count > 1, cost.argmin(1), chosen.to(torch.uint8).argmax(1))
        foreground = count > 0
        matched_iou = iou.gather(1, gt_index[:, None]).squeeze(1) * foreground
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(b, a, 4))
        return AlignOTAAssignment(foreground, gt_index, labels.gather(1, gt_index), boxes, matched_iou)

    def _regions(self, priors: Tensor, strides: Tensor, gt_boxes: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, G, A]`` bools: the prior lies strictly inside the box / within the centre region."""
        x, y = priors[:, 0], priors[:, 1]
        x1, y1, x2, y2 = (gt_boxes[..., i, None] for i in range(4))
        in_box = torch.minimum(torch.minimum(x - x1, y - y1), torch.minimum(x2 - x, y2 - y)) > 0
        reach = self.center_radius * strides
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        in_centre = (reach - torch.maximum((x - cx).abs(), (y - cy).abs())) > 0
        return in_box, in_centre

    @staticmethod
    def _classification_cost(scores: Tensor, labels: Tensor, iou: Tensor) -> Tensor:
        """``[B, G, A]``: quality-focal cost of each prior's scores against each ground truth's soft
        label (IoU on its class, 0 elsewhere), summed over classes without a ``[B, G, A, C]`` tensor:
        the all-negative cost, minus the ground truth's own class's negative term, plus its soft term."""
        log_p = scores.log().clamp(min=LOG_FLOOR)
        log_not_p = torch.log1p(-scores).clamp(min=LOG_FLOOR)
        negative = -log_not_p * scores.pow(2)          # BCE(p, 0) * |0 - p|^2, [B, A, C]
        index = labels[:, None, :].expand(-1, scores.shape[1], -1)  # [B, A, G]
        own_p = scores.gather(2, index).transpose(1, 2)  # [B, G, A]
        own_neg = negative.gather(2, index).transpose(1, 2)
        own_log_p = log_p.gather(2, index).transpose(1, 2)
        own_log_not_p = log_not_p.gather(2, index).transpose(1, 2)
        soft = -(iou * own_log_p + (1 - iou) * own_log_not_p) * (iou - own_p).pow(2)
        return negative.sum(-1)[:, None, :] - own_neg + soft

    def _cheapest(self, cost: Tensor, dynamic_k: Tensor) -> Tensor:
        """``[B, G, A]`` bool: each ground truth's ``dynamic_k`` cheapest priors (k never exceeds
        ``candidate_topk``, a sum of that many IoUs, so one topk of that size serves every row)."""
        k_max = min(self.candidate_topk, cost.shape[-1])
        order = cost.topk(k_max, dim=-1, largest=False).indices
        keep = torch.arange(k_max, device=cost.device) < dynamic_k[..., None]
        return torch.zeros_like(cost, dtype=torch.bool).scatter_(-1, order, keep)
