"""RTMDet's dynamic soft-label assignment, batched (eager only: never inside a graph).

For every ground truth, each *candidate* prior (one lying strictly inside some ground truth of
the same image) gets a cost, the sum of three terms:

- soft centre prior: ``10 ** (d - 3)``, ``d`` the distance from the prior to the ground truth's
  centre in units of the prior's stride: near priors are cheap, far ones prohibitive;
- IoU cost: ``-3 log(IoU)`` of the prior's current predicted box against the ground truth;
- soft classification cost: the quality-focal cost of the prior's class logits against a soft
  label, the IoU on the ground truth's class and 0 elsewhere (summed over classes).

Each ground truth takes its ``k`` cheapest candidates, ``k`` being the integer part of the sum of
its 13 best candidate IoUs (at least 1): well-predicted objects get more positives. A prior taken
by several ground truths keeps the cheapest (over all ground truths of its image). A positive's
soft label is the IoU of its predicted box with its ground truth.

The semantics are mmdetection's per-image ``DynamicSoftLabelAssigner``; the computation is one
pass over a padded ``[B, G, A]`` cost tensor: no loop over images or ground truths, no ``.item()``,
no boolean-mask selection, no ``nonzero``, so assignment adds no host round trip to a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ...layers.assign import anchors_inside_boxes
from ...layers.boxes import aligned_iou

INF_COST = 1e30  # non-candidates: above any reachable cost (the centre prior is capped below it)
_MAX_CENTRE_EXPONENT = 20.0  # 23 strides from the centre; uncapped, float32 overflows past ~41
_EPS = 1e-7


@dataclass(frozen=True)
class SoftAssignment:
    """Per-prior training targets for ``B`` images and ``A`` priors.

    Attributes:
        labels: ``[B, A]`` int64 class of the assigned ground truth; meaningless on background.
        boxes: ``[B, A, 4]`` xyxy box of the assigned ground truth; meaningless on background.
        quality: ``[B, A]`` float soft label: IoU of the prior's predicted box with its ground
            truth on positives, 0 on background.
        foreground: ``[B, A]`` bool, True where a prior was given a ground truth.
        gt_index: ``[B, A]`` int64 column of the assigned ground truth in the padded inputs.
    """

    labels: Tensor
    boxes: Tensor
    quality: Tensor
    foreground: Tensor
    gt_index: Tensor


class DynamicSoftLabelAssigner:
    """Assign padded ground truths to priors (see the module docstring). A plain object, no
    parameters; call it under any grad mode, it records no autograd history.

    Args:
        topk: IoUs summed for each ground truth's dynamic ``k`` (13 in RTMDet).
        soft_center_radius: distance, in strides, at which the centre prior costs 1.
        iou_weight: weight of the ``-log(IoU)`` cost.
    """

    def __init__(self, *, topk: int = 13, soft_center_radius: float = 3.0, iou_weight: float = 3.0) -> None:
        if topk < 1:
            raise ConfigError(f"topk={topk} must be >= 1 (IoUs summed for the dynamic k); RTMDet uses 13")
        if iou_weight < 0:
            raise ConfigError(f"iou_weight={iou_weight} must be >= 0; RTMDet uses 3.0")
        self.topk, self.soft_center_radius, self.iou_weight = topk, soft_center_radius, iou_weight

    @torch.no_grad()
    def __call__(self, pred_logits: Tensor, pred_boxes: Tensor, priors: Tensor, prior_strides: Tensor,
                 gt_labels: Tensor, gt_boxes: Tensor, gt_mask: Tensor) -> SoftAssignment:
        """Assign a batch.

        Args:
            pred_logits: ``[B, A, C]`` class logits (before sigmoid).
            pred_boxes: ``[B, A, 4]`` predicted xyxy boxes, same units as ``gt_boxes``.
            priors: ``[A, 2]`` prior points (x, y), same units as ``gt_boxes``.
            prior_strides: ``[A]`` or ``[A, 1]`` stride of each prior, same units.
            gt_labels: ``[B, G]`` integer classes in [0, C) (padding columns may hold anything).
            gt_boxes: ``[B, G, 4]`` xyxy ground-truth boxes.
            gt_mask: ``[B, G]`` bool, False on padding columns.

        Returns:
            The :class:`SoftAssignment` (float32 quality whatever the input dtype).
        """
        b, a, c = pred_logits.shape
        if pred_boxes.shape != (b, a, 4) or priors.shape != (a, 2) or prior_strides.numel() != a:
            raise ValueError(f"pred_boxes {tuple(pred_boxes.shape)}, priors {tuple(priors.shape)} and "
                             f"prior_strides {tuple(prior_strides.shape)} must be [{b}, {a}, 4], [{a}, 2] and "
                             f"[{a}] to match pred_logits {tuple(pred_logits.shape)}")
        if gt_boxes.shape[1] == 0:  # shape only, known on the host: one masked column keeps one code path
            gt_labels, gt_boxes, gt_mask = gt_labels.new_zeros(b, 1), gt_boxes.new_zeros(b, 1, 4), gt_mask.new_zeros(b, 1)
        pred_logits, pred_boxes, gt_boxes = pred_logits.float(), pred_boxes.float(), gt_boxes.float()
        labels = gt_labels.long().clamp(0, c - 1)
        inside = anchors_inside_boxes(priors.float(), gt_boxes) & gt_mask[..., None]  # [B, G, A]
        candidate = (inside.sum(1) > 0)[:, None, :] & gt_mask[..., None]  # not .any(): it syncs on CUDA
        iou = aligned_iou(gt_boxes[:, :, None], pred_boxes[:, None])  # [B, G, A]
        cost = self._centre_cost(priors.float(), prior_strides.float().view(1, 1, a), gt_boxes)
        cost.add_(self._class_cost(pred_logits, labels, iou)).add_((iou + _EPS).log_(), alpha=-self.iou_weight)
        cost.masked_fill_(~candidate, INF_COST)
        matching = self._dynamic_k(cost, iou * candidate, candidate)
        gt_index, foreground = self._resolve_conflicts(matching, cost)
        quality = iou.gather(1, gt_index[:, None]).squeeze(1) * foreground
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(b, a, 4))
        return SoftAssignment(labels.gather(1, gt_index), boxes, quality, foreground, gt_index)

    def _centre_cost(self, priors: Tensor, strides: Tensor, gt_boxes: Tensor) -> Tensor:
        """``[B, G, A]``: ``10 ** (distance / stride - radius)``, capped so it stays finite."""
        centres = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2  # [B, G, 2]
        dx = priors[:, 0] - centres[..., 0, None]
        dy = priors[:, 1] - centres[..., 1, None]
        exponent = (torch.hypot(dx, dy) / strides - self.soft_center_radius).clamp_(max=_MAX_CENTRE_EXPONENT)
        return exponent.mul_(math.log(10.0)).exp_()

    @staticmethod
    def _class_cost(logits: Tensor, labels: Tensor, iou: Tensor) -> Tensor:
        """``[B, G, A]``: sum over classes of ``BCE(p, t) * |t - sigmoid(p)|**2`` with the soft label
        ``t`` = IoU on the ground truth's class, 0 elsewhere.

        Every class but the ground truth's sees target 0, so the sum is (all classes at target 0,
        a ``[B, A]`` pass done once, not once per ground truth) plus the change at the ground
        truth's class: with ``x`` its logit, ``s = sigmoid(x)``, ``BCE(x, t) = softplus(x) - t x``,
        that change is ``(softplus(x) - t x)(t - s)**2 - softplus(x) s**2``.
        """
        b, a, _ = logits.shape
        background = (F.softplus(logits) * logits.sigmoid().square()).sum(-1)  # [B, A]
        x = logits.gather(2, labels[:, None, :].expand(b, a, labels.shape[1])).transpose(1, 2)  # [B, G, A]
        s = x.sigmoid()
        gap2 = (iou - s).square_()
        cost = F.softplus(x).mul_(gap2 - s.square_())
        return cost.sub_(x.mul_(iou).mul_(gap2)).add_(background[:, None, :])

    def _dynamic_k(self, cost: Tensor, candidate_iou: Tensor, candidate: Tensor) -> Tensor:
        """``[B, G, A]`` bool: each ground truth's ``k`` cheapest candidates.

        ``k`` never exceeds the number of candidates (it sums at most that many IoUs <= 1), except
        through the floor of 1 when there are none: the candidate mask drops those picks.
        """
        k_max = min(self.topk, cost.shape[-1])
        dynamic_k = candidate_iou.topk(k_max, dim=-1).values.sum(-1).long().clamp(min=1)  # floor: IoUs >= 0
        cheapest = cost.topk(k_max, dim=-1, largest=False).indices  # [B, G, k_max]
        rank = torch.arange(k_max, device=cost.device)
        take = (rank < dynamic_k[..., None]) & candidate.gather(-1, cheapest)
        return torch.zeros_like(candidate).scatter_(-1, cheapest, take)

    @staticmethod
    def _resolve_conflicts(matching: Tensor, cost: Tensor) -> tuple[Tensor, Tensor]:
        """One ground truth per prior: its only match, or, when several took it, the cheapest
        ground truth of its image (over all of them, as upstream does)."""
        count = matching.sum(1)  # [B, A]
        only = torch.where(matching, cost, torch.full_like(cost, 2 * INF_COST)).argmin(1)
        gt_index = torch.where(count > 1, cost.argmin(1), only)
        return gt_index, count > 0
