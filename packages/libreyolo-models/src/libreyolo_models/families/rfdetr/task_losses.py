"""RF-DETR's segment and pose losses: detection's set loss (``loss.RFDETRLoss``: IA-BCE, L1, GIoU,
each set and query group matched on its own) plus the task's terms on the matched queries.

Segment (upstream's gains: ``cls`` 5, ``bbox`` 5, ``giou`` 2, ``mask_ce`` 5, ``mask_dice`` 5):
matching adds 5 x point-sampled mask cross-entropy and 5 x Dice costs (``layers.mask_points``,
``h * w / 16`` random points shared by the step), the loss the same two terms on ``max(h, h * w /
16)`` points per matched mask, mostly uncertain ones. Every decoder layer reads its own pixel map
(after its refinement block), the proposals the bare map; each set's mask logits are materialised
for its matched queries only. Normalised like the box terms (boxes over ranks times groups).

Pose (``cls`` 1, ``bbox`` 5, ``giou`` 2, ``keypoints_l1`` 10, ``keypoints_oks`` 4,
``keypoints_vis`` 1; detection's matching): on matched queries, L1 of x and y divided by the
square root of the target box's area, summed over labelled keypoints and divided by their count
in the set; 1 - OKS per object (mean over its labelled keypoints, the dataset's sigmas, the box
area as the object's area), and the visibility logits' binary cross-entropy against "labelled",
averaged over keypoints; both divided by the box normaliser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...contract.instances import InstanceTargets
from ...layers.hungarian import HungarianMatcher
from ...layers.mask_points import mask_costs, mask_loss_terms, matched_mask_logits
from ...layers.set_targets import GroupedTargets, group_targets
from .loss import RFDETRLoss, pair_index

SEGMENT_LOSS_NAMES = ("cls", "bbox", "giou", "mask_ce", "mask_dice")
POSE_LOSS_NAMES = ("cls", "bbox", "giou", "keypoints_l1", "keypoints_oks", "keypoints_vis")
MASK_COST = 5.0


def group_instances(targets: InstanceTargets, batch: int, nc: int) -> tuple[GroupedTargets, Tensor]:
    """Boxes grouped per image (``layers.set_targets``) and, for each grouped row, its row in
    ``targets`` (so masks and keypoints follow the same order)."""
    grouped = group_targets(targets.boxes, batch, nc)
    order = torch.sort(targets.boxes[:, 0].long().cpu(), stable=True).indices
    return grouped, order


class _SetLoss(RFDETRLoss):
    """``RFDETRLoss`` with named terms beyond the three box ones (gains looked up by name)."""

    names: tuple[str, ...] = ()

    def __init__(self, gains: Mapping[str, float]) -> None:
        missing = [name for name in self.names if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; this loss's terms are {self.names}")
        super().__init__(gains, matcher=HungarianMatcher(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0))
        self.gains = torch.tensor([float(gains[name]) for name in self.names])

    def _sets(self, outputs: Mapping[str, object]) -> list[Mapping[str, Tensor]]:
        layers: Sequence[Mapping[str, Tensor]] = [*outputs["aux_outputs"], outputs]  # type: ignore[list-item, misc]
        return [*layers, outputs["enc_outputs"]]  # type: ignore[list-item]

    #: terms already normalised on this rank (pose L1: by its labelled keypoints), left out of
    #: the box normalisation
    self_normalised: tuple[str, ...] = ()

    def _finish(self, terms: Tensor, local_boxes: float, device: torch.device,
                normalizer_sum: Callable[[Tensor], Tensor] | None, world_size: int) -> tuple[Tensor, Tensor]:
        local = torch.tensor(local_boxes, device=device)
        total_boxes = normalizer_sum(local) if normalizer_sum is not None else local
        scale = torch.full_like(terms, 1.0) * (world_size / total_boxes.clamp(min=float(world_size)))
        for name in self.self_normalised:
            scale[self.names.index(name)] = 1.0
        items = terms * self.gains.to(device) * scale
        return items.sum(), items.detach()


class RFDETRSegmentLoss(_SetLoss):
    """Set loss plus point-sampled mask terms (see the module docstring)."""

    names = SEGMENT_LOSS_NAMES

    def __call__(self, outputs: Mapping[str, object], targets: InstanceTargets, groups: int, nc: int, *,  # type: ignore[override]
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1) -> tuple[Tensor, Tensor]:
        sets = self._sets(outputs)
        device = sets[-1]["pred_logits"].device
        batch = int(sets[-1]["pred_logits"].shape[0])
        grouped, order = group_instances(targets, batch, nc)
        if targets.masks is None:
            raise ValueError("RF-DETR segment training needs masks in its targets (segment data)")
        gt_masks = targets.masks[order].to(device, non_blocking=True).float()
        gt_labels, gt_boxes = grouped.labels.to(device), grouped.boxes.to(device)
        offsets = grouped.offsets()
        gt_image = grouped.padded_rows().to(device)
        terms = torch.zeros(len(self.names), device=device)
        for out in sets:
            logits, boxes = out["pred_logits"][None].float(), out["pred_boxes"][None].float()
            pixels, queries, bias = out["mask_pixels"], out["mask_queries"], out["mask_bias"]
            extra = None
            if grouped.total:
                ce_cost, dice_cost = mask_costs(pixels.detach(), queries.detach(), bias.detach(), gt_masks, gt_image)
                extra = (MASK_COST * (ce_cost + dice_cost))[None]
            matches = self.matcher(logits.detach(), boxes.detach(), grouped, groups=groups, extra=extra)
            pairs = pair_index(matches, offsets, device)
            box_terms = self.terms(logits, boxes, pairs, gt_labels, gt_boxes)
            _, image, query, rows = pairs
            mask_logits = matched_mask_logits(pixels, queries, bias, image, query)
            ce, dice = mask_loss_terms(mask_logits, gt_masks[rows])
            terms = terms + torch.cat((box_terms, torch.stack((ce, dice))))
        return self._finish(terms, float(grouped.total * groups), device, normalizer_sum, world_size)


class RFDETRPoseLoss(_SetLoss):
    """Set loss plus keypoint terms (see the module docstring)."""

    names = POSE_LOSS_NAMES
    self_normalised = ("keypoints_l1",)

    def __call__(self, outputs: Mapping[str, object], targets: InstanceTargets, groups: int, nc: int, *,  # type: ignore[override]
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1) -> tuple[Tensor, Tensor]:
        sets = self._sets(outputs)
        device = sets[-1]["pred_logits"].device
        batch = int(sets[-1]["pred_logits"].shape[0])
        grouped, order = group_instances(targets, batch, nc)
        if targets.keypoints is None:
            raise ValueError("RF-DETR pose training needs keypoints in its targets (pose data)")
        k = int(sets[-1]["pred_keypoints"].shape[-2])
        gt_kp = targets.keypoints[order].to(device, non_blocking=True).float().reshape(-1, k, 3)
        sigmas = (targets.sigmas if targets.sigmas is not None else torch.full((k,), 1.0 / k)).to(device).float()
        gt_labels, gt_boxes = grouped.labels.to(device), grouped.boxes.to(device)
        offsets = grouped.offsets()
        terms = torch.zeros(len(self.names), device=device)
        for out in sets:
            logits, boxes = out["pred_logits"][None].float(), out["pred_boxes"][None].float()
            matches = self.matcher(logits.detach(), boxes.detach(), grouped, groups=groups)
            pairs = pair_index(matches, offsets, device)
            box_terms = self.terms(logits, boxes, pairs, gt_labels, gt_boxes)
            _, image, query, rows = pairs
            kp_terms = keypoint_terms(out["pred_keypoints"][image, query].float(), gt_kp[rows], gt_boxes[rows], sigmas)
            terms = terms + torch.cat((box_terms, kp_terms))
        return self._finish(terms, float(grouped.total * groups), device, normalizer_sum, world_size)


def keypoint_terms(pred: Tensor, truth: Tensor, boxes: Tensor, sigmas: Tensor) -> Tensor:
    """``[l1, oks, vis]`` of matched keypoints ``pred [K', N, 3]`` (x, y normalised, visibility
    logit) against ``truth [K', N, 3]`` with target boxes ``[K', 4]`` (cx, cy, w, h): the L1 term
    already divided by the labelled keypoints' count, the other two unnormalised sums."""
    if pred.shape[0] == 0:
        zero = pred.sum() * 0.0
        return torch.stack((zero, zero, zero))
    labelled = truth[..., 2] > 0
    weight = labelled.to(pred.dtype)
    count = weight.sum(1).clamp(min=1.0)
    area = (boxes[:, 2] * boxes[:, 3]).clamp(min=1e-9)
    scale = area.sqrt().clamp(min=1e-6)[:, None, None]
    l1 = (F.l1_loss(pred[..., :2] / scale, truth[..., :2] / scale, reduction="none").sum(-1) * weight).sum()
    l1 = l1 / count.sum()
    dist2 = ((pred[..., :2] - truth[..., :2]) ** 2).sum(-1)
    oks = 1.0 - torch.exp(-dist2 / (2.0 * area[:, None] * (2.0 * sigmas[None]) ** 2 + 1e-9))
    per_object = torch.where(labelled.any(1), (oks * weight).sum(1) / count, torch.zeros_like(count))
    vis = F.binary_cross_entropy_with_logits(pred[..., 2], weight, reduction="none").mean(1)
    return torch.stack((l1, per_object.sum(), vis.sum()))

