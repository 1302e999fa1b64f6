"""EC's segment loss: detection's criterion (``loss.ECLoss``) plus point-sampled mask terms, with
upstream's segment gains and costs.

Gains: ``mal`` 2, ``bbox`` 1, ``giou`` 1, ``fgl`` 0.15, ``ddf`` 1.5, ``mask_ce`` 5, ``mask_dice`` 5.
Matching (every decoder layer, ``pre`` and the encoder's selection, each on its own): class 2, L1 1,
GIoU 1, plus 5 x mask cross-entropy and 5 x Dice costs for the layers and ``pre`` (the encoder's
selection has no masks), on ``h * w / 16`` random points (``layers.mask_points``). Mask terms: each
decoder layer and ``pre`` (layer 0's factors) on its own matches, the denoising queries of every
layer and of ``pre`` on theirs, ``max(h, h * w / 16)`` mostly uncertain points per mask;
normalised like ``mal`` (boxes over ranks; denoising: times the denoising groups).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from ...contract.instances import InstanceTargets
from ...layers.detr.denoising import DenoisingQueries
from ...layers.hungarian import EMPTY_MATCH, HungarianMatcher, Match
from ...layers.mask_points import mask_costs, mask_loss_terms, matched_mask_logits
from ...layers.set_targets import GroupedTargets
from .loss import LOSS_NAMES, ECLoss, index_of

SEGMENT_LOSS_NAMES = (*LOSS_NAMES, "mask_ce", "mask_dice")
MASK_COST = 5.0


class _MaskAwareMatcher(HungarianMatcher):
    """Detection's matcher plus the mask costs of the sets that have masks (set before each call
    with :meth:`prepare`); keeps the last matches for the mask terms."""

    def prepare(self, pixels: Tensor, queries: Tensor, bias: Tensor, gt_masks: Tensor, gt_image: Tensor) -> None:
        self._factors = (pixels, queries, bias, gt_masks, gt_image)
        self.last: list[list[Match]] = []

    def __call__(self, logits: Tensor, boxes: Tensor, targets: GroupedTargets, groups: int = 1, *,
                 extra: Tensor | None = None, iou_order: float | None = None) -> list[list[Match]]:
        pixels, queries, bias, gt_masks, gt_image = self._factors
        if targets.total:
            layers = pixels.shape[0]
            costs = torch.zeros((logits.shape[0], logits.shape[1], logits.shape[2], gt_image.shape[1]),
                                device=logits.device)
            for s in range(layers + 1):    # every layer, then pre (layer 0's factors); the encoder's: none
                layer = s if s < layers else 0
                ce, dice = mask_costs(pixels[layer].detach(), queries[layer].detach(), bias.detach(), gt_masks, gt_image)
                costs[s] = MASK_COST * (ce + dice)
            extra = costs
        self.last = super().__call__(logits, boxes, targets, groups, extra=extra, iou_order=iou_order)
        return self.last


class ECSegmentLoss(ECLoss):
    """``ECLoss`` plus the mask terms (see the module docstring)."""

    def __init__(self, gains: Mapping[str, float]) -> None:
        super().__init__(gains, matcher=_MaskAwareMatcher(cost_class=2.0, cost_bbox=1.0, cost_giou=1.0, log_eps=1e-8))
        self.mask_gains = torch.tensor([float(gains["mask_ce"]), float(gains["mask_dice"])])

    def __call__(self, outputs: Mapping[str, Tensor], targets: GroupedTargets,  # type: ignore[override]
                 denoising: DenoisingQueries, *, masks: Tensor,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """``masks``: ``[M, h, w]`` the ground-truth masks in ``targets``' (grouped) order."""
        device = outputs["logits"].device
        pixels, queries, bias = outputs["mask_pixels"], outputs["mask_queries"], outputs["mask_bias"]
        gt_masks = masks.to(device, non_blocking=True).float()
        matcher = self.matcher
        assert isinstance(matcher, _MaskAwareMatcher)
        matcher.prepare(pixels, queries, bias, gt_masks, targets.padded_rows().to(device))
        counts: list[Tensor] = []

        def captured(local: Tensor) -> Tensor:
            total = normalizer_sum(local) if normalizer_sum is not None else local
            counts.append(total)
            return total

        total, items = super().__call__(outputs, targets, denoising, normalizer_sum=captured, world_size=world_size)
        n_boxes = (counts[0][0] / world_size).clamp(min=1.0)
        offsets = targets.offsets()
        layers = pixels.shape[0]
        terms = torch.zeros(2, device=device)
        for s in range(layers + 1):
            layer = s if s < layers else 0
            _, q, rows = index = index_of(matcher.last[s], offsets, device)
            logits = matched_mask_logits(pixels[layer], queries[layer], bias, index[0], q)
            terms = terms + torch.stack(mask_loss_terms(logits, gt_masks[rows])) / n_boxes
        if denoising.num_queries:
            matches = [(denoising.positive_slots(b).numpy(), np.tile(np.arange(n), denoising.groups)) if n
                       else EMPTY_MATCH for b, n in enumerate(denoising.counts)]
            image, q, rows = index_of(matches, offsets, device)
            dn_queries = outputs["dn_mask_queries"]
            for s in range(layers + 1):
                layer = s if s < layers else 0
                logits = matched_mask_logits(pixels[layer], dn_queries[layer], bias, image, q)
                terms = terms + torch.stack(mask_loss_terms(logits, gt_masks[rows])) / (n_boxes * denoising.groups)
        else:
            terms = terms + 0.0 * outputs["dn_mask_queries"].sum()
        mask_items = terms * self.mask_gains.to(device)
        return total + mask_items.sum(), torch.cat((items, mask_items.detach()))


def grouped_masks(targets: InstanceTargets) -> Tensor:
    """The targets' masks in ``layers.set_targets.group_targets`` order (stable by image)."""
    if targets.masks is None:
        raise ValueError("EC segment training needs masks in its targets (segment data)")
    order = torch.sort(targets.boxes[:, 0].long().cpu(), stable=True).indices
    return targets.masks[order]

