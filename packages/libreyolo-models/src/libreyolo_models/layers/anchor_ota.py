"""SimOTA for anchor-based heads (YOLOv7's lead-head assigner), batched (eager only: never graphed).

As the official YOLOv7 ``ComputeLossOTA.build_targets`` defines it, per image:

1. Candidate slots (``find_3_positive``): for every ground truth, level and anchor whose shape fits
   (width and height within ``anchor_t`` times the anchor's, both ways), the cell holding the box
   centre, plus the neighbouring cell left / above / right / below when the centre lies within
   ``neighbour_bias`` of that side (0.5: the two nearest neighbours; 1.0, the coarse
   ``find_5_positive`` of the auxiliary heads: all four). A slot is one (level, anchor, cell);
   the same cell can appear in several ground truths' slot lists, and each appearance is its own
   candidate, as upstream's.
2. Every ground truth of the image is matched against every candidate slot of the image, at a
   cost of ``BCE(sqrt(sigmoid(cls) * sigmoid(obj)), one-hot)`` summed over classes plus
   3 x ``-log(IoU + 1e-8)`` of the slot's decoded box.
3. Dynamic k from the sum of the ground truth's ``candidates_k`` best IoUs (at least 1); its k
   cheapest slots; a slot taken twice goes to the cheapest ground truth.

Everything runs on fixed shapes: slots ``[B, K]`` with K = levels x G x anchors x 5 (invalid
slots masked), no loop over images or ground truths, no ``.item()``, no boolean-mask selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .boxes import xywh_to_xyxy

LOG_FLOOR = -100.0
# Cell offsets of the five slots: centre, then the neighbours left, above, right, below (scaled
# by the bias, subtracted from the centre before flooring).
_OFFSETS = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))


@dataclass(frozen=True)
class AnchorSlots:
    """Candidate slots of a batch: ``[B, K]`` each (level-major, then ground truth, anchor, offset).

    Attributes:
        level, anchor, gj, gi: where the slot is (level index, anchor index, cell row and column).
        gt: ``[B, K]`` the ground truth column whose candidate list the slot came from.
        valid: ``[B, K]`` bool, the slot exists (anchor fits, neighbour condition, gt not padding).
        boxes: ``[B, K, 4]`` the slot's decoded prediction, xyxy pixels.
        logits: ``[B, K, 1 + C]`` its objectness and class logits.
    """

    level: Tensor
    anchor: Tensor
    gj: Tensor
    gi: Tensor
    gt: Tensor
    valid: Tensor
    boxes: Tensor
    logits: Tensor


class AnchorOTAAssigner:
    """Candidate slots and dynamic-k matching (see the module docstring).

    Args:
        anchor_t: largest width or height ratio between a box and an anchor that may predict it (4.0).
        neighbour_bias: 0.5 (lead head: three cells per anchor) or 1.0 (coarse: five cells).
        candidates_k: IoUs summed for the dynamic k (10).
        iou_weight: weight of the IoU cost (3.0).
    """

    def __init__(self, *, anchor_t: float = 4.0, neighbour_bias: float = 0.5, candidates_k: int = 10,
                 iou_weight: float = 3.0) -> None:
        if anchor_t <= 1.0:
            raise ConfigError(f"anchor_t={anchor_t} must be > 1 (a ratio of box to anchor size); YOLOv7 uses 4.0")
        if not 0.0 < neighbour_bias <= 1.0:
            raise ConfigError(f"neighbour_bias={neighbour_bias} must be in (0, 1]: 0.5 (lead) or 1.0 (coarse)")
        if candidates_k < 1:
            raise ConfigError(f"candidates_k={candidates_k} must be >= 1; YOLOv7 uses 10")
        self.anchor_t, self.bias, self.candidates_k, self.iou_weight = anchor_t, neighbour_bias, candidates_k, iou_weight

    def slots(self, raw: list[Tensor], anchors: Tensor, strides: tuple[int, ...], gt_boxes: Tensor,
              gt_mask: Tensor) -> AnchorSlots:
        """Candidate slots and their predictions.

        Args:
            raw: per level ``[B, na, H, W, 5 + C]`` raw logits (tx, ty, tw, th, obj, classes).
            anchors: ``[L, na, 2]`` anchor sizes in grid units of each level.
            strides: each level's stride.
            gt_boxes: ``[B, G, 4]`` cx, cy, w, h in input pixels; gt_mask: ``[B, G]`` bool.
        """
        parts: list[tuple[Tensor, ...]] = []
        b, g = gt_mask.shape
        offsets = torch.tensor(_OFFSETS, device=gt_boxes.device, dtype=gt_boxes.dtype) * self.bias  # [5, 2]
        for level, (p, s) in enumerate(zip(raw, strides)):
            na, h, w = p.shape[1], p.shape[2], p.shape[3]
            anchor = anchors[level].to(gt_boxes.dtype)  # [na, 2]
            gxy, gwh = gt_boxes[..., :2] / s, gt_boxes[..., 2:] / s  # [B, G, 2]
            ratio = gwh[:, :, None] / anchor  # [B, G, na, 2]
            fits = torch.maximum(ratio, 1 / ratio).amax(-1) < self.anchor_t
            inverse = torch.tensor((w, h), device=gxy.device, dtype=gxy.dtype) - gxy
            near_low = (gxy % 1.0 < self.bias) & (gxy > 1.0)       # left (x), above (y)
            near_high = (inverse % 1.0 < self.bias) & (inverse > 1.0)  # right (x), below (y)
            use = torch.stack((torch.ones_like(near_low[..., 0]), near_low[..., 0], near_low[..., 1],
                               near_high[..., 0], near_high[..., 1]), -1)  # [B, G, 5]
            cell = (gxy[:, :, None] - offsets).long()  # [B, G, 5, 2], truncated like upstream's .long()
            gi = cell[..., 0].clamp(0, w - 1)[:, :, None].expand(b, g, na, 5)
            gj = cell[..., 1].clamp(0, h - 1)[:, :, None].expand(b, g, na, 5)
            a = torch.arange(na, device=p.device)[None, None, :, None].expand(b, g, na, 5)
            valid = fits[..., None] & use[:, :, None] & gt_mask[:, :, None, None]
            flat = p.reshape(b, na * h * w, p.shape[-1])
            index = (a * h * w + gj * w + gi).reshape(b, -1)
            picked = flat.gather(1, index[..., None].expand(-1, -1, flat.shape[-1])).float()  # [B, K_l, 5 + C]
            grid = torch.stack((gi, gj), -1).reshape(b, -1, 2).to(picked.dtype)
            xy = (picked[..., :2].sigmoid() * 2.0 - 0.5 + grid) * s
            wh = (picked[..., 2:4].sigmoid() * 2.0) ** 2 * anchor[a.reshape(b, -1)] * s
            gt_col = torch.arange(g, device=p.device)[None, :, None, None].expand(b, g, na, 5)
            parts.append((torch.full_like(index, level), a.reshape(b, -1), gj.reshape(b, -1), gi.reshape(b, -1),
                          gt_col.reshape(b, -1), valid.reshape(b, -1), xywh_to_xyxy(torch.cat((xy, wh), -1)),
                          picked[..., 4:]))
        return AnchorSlots(*(torch.cat(column, 1) for column in zip(*parts)))

    @torch.no_grad()
    def match(self, slots: AnchorSlots, gt_labels: Tensor, gt_boxes: Tensor, gt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(foreground [B, K] bool, gt_index [B, K])``: which slots are positives, for which ground truth."""
        gts = xywh_to_xyxy(gt_boxes.float())
        usable = slots.valid[:, None, :] & gt_mask[..., None]  # [B, G, K]
        iou = _pairwise_iou(gts, slots.boxes) * usable
        cost = self._classification_cost(slots.logits, gt_labels.long()) + self.iou_weight * -torch.log(iou + 1e-8)
        cost = cost.masked_fill(~usable, float("inf"))
        has_candidate = usable.sum(-1) > 0
        top = iou.topk(min(self.candidates_k, iou.shape[-1]), dim=-1).values.sum(-1)
        dynamic_k = torch.where(has_candidate, top.long().clamp(min=1), torch.zeros_like(top, dtype=torch.long))
        k_max = min(self.candidates_k, cost.shape[-1])
        order = cost.topk(k_max, dim=-1, largest=False).indices
        keep = torch.arange(k_max, device=cost.device) < dynamic_k[..., None]
        chosen = torch.zeros_like(usable).scatter_(-1, order, keep) & usable
        count = chosen.sum(1)
        gt_index = torch.where(count > 1, cost.argmin(1), chosen.to(torch.uint8).argmax(1))
        return count > 0, gt_index

    @staticmethod
    def _classification_cost(logits: Tensor, labels: Tensor) -> Tensor:
        """``[B, G, K]``: BCE of ``sqrt(sigmoid(cls) * sigmoid(obj))`` against each gt's one-hot class."""
        y = (logits[..., 1:].sigmoid() * logits[..., :1].sigmoid()).sqrt()
        log_y = y.log().clamp(min=LOG_FLOOR)
        log_not_y = torch.log1p(-y).clamp(min=LOG_FLOOR)
        index = labels[:, None, :].expand(-1, y.shape[1], -1)  # [B, K, G]
        own = (log_not_y.gather(2, index) - log_y.gather(2, index)).transpose(1, 2)
        return -log_not_y.sum(-1)[:, None, :] + own


def _pairwise_iou(a: Tensor, b: Tensor) -> Tensor:
    """``[B, G, 4]`` x ``[B, K, 4]`` xyxy -> ``[B, G, K]`` (plain IoU, as torchvision's box_iou)."""
    lt = torch.maximum(a[:, :, None, :2], b[:, None, :, :2])
    rb = torch.minimum(a[:, :, None, 2:], b[:, None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / (area_a[:, :, None] + area_b[:, None] - inter).clamp(min=1e-12)
