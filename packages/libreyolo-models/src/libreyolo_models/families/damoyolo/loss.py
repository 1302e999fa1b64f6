"""DAMO-YOLO training loss: AlignOTA assignment, then quality focal + GIoU + DFL (eager only).

The terms and their normalisers are upstream's (tinyvision/DAMO-YOLO's ZeroHead, as upstream
LibreYOLO ports it):

- cls (gain 1.0): quality focal loss (beta 2) of every prior's class scores against the soft
  target, the IoU on a positive's class and 0 elsewhere; divided by the number of positives;
- box (gain 2.0): ``1 - GIoU`` of each positive's decoded box with its ground truth, weighted by
  the positive's best class score (detached), divided by the sum of those weights;
- dfl (gain 0.25): distribution focal loss of each side's bins around the target distance (in
  strides, from the prior's corner point, clamped below ``reg_max - 0.1``), weighted like box,
  divided by four times the same sum.

Scale and ranks: both normalisers are summed over ranks in one collective, clamped to 1 after;
the returned loss is ``W * U / N * global_batch`` (the per-image sum this zoo's YOLO recipes
assume, ``layers/loss_scale.py``); items are ``W * U / N``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ...layers.align_ota import AlignOTAAssigner
from ...layers.anchors import AnchorCache
from ...layers.boxes import box_area, wh_area, xywh_to_xyxy
from ...layers.ground_truth import padded_ground_truths
from ...layers.head_maps import flatten_levels
from ...layers.loss_scale import check_scaling, global_normalizers
from .head import STRIDES

GIOU_EPS = 1e-6   # upstream GIoULoss's floor on the union and the enclosing area
DFL_MARGIN = 0.1  # target distances stay this far below reg_max, so the upper bin exists


def aligned_giou(a: Tensor, b: Tensor, eps: float = GIOU_EPS) -> Tensor:
    """GIoU of matched xyxy boxes ``[..., 4]``; union and enclosing area floored at ``eps``."""
    inter = wh_area((torch.minimum(a[..., 2:], b[..., 2:]) - torch.maximum(a[..., :2], b[..., :2])).clamp(min=0))
    union = (wh_area(a[..., 2:] - a[..., :2]) + wh_area(b[..., 2:] - b[..., :2]) - inter).clamp(min=eps)
    enclose = box_area(torch.cat((torch.minimum(a[..., :2], b[..., :2]), torch.maximum(a[..., 2:], b[..., 2:])), -1))
    enclose = enclose.clamp(min=eps)
    return inter / union - (enclose - union) / enclose


class DamoYoloLoss:
    """Loss of the ZeroHead's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes; reg_max: the last distance bin (16, or 7 for the nano sizes).
        cls, box, dfl: gains (1.0, 2.0, 0.25); beta: the quality focal exponent (2.0).
    """

    def __init__(self, nc: int, reg_max: int, *, cls: float = 1.0, box: float = 2.0, dfl: float = 0.25,
                 beta: float = 2.0) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        if reg_max < 1:
            raise ConfigError(f"reg_max={reg_max} must be >= 1 (DAMO-YOLO: 16, nano sizes 7)")
        self.nc, self.reg_max, self.beta = nc, reg_max, beta
        self.gains = (cls, box, dfl)
        self.assigner = AlignOTAAssigner()
        self.priors = AnchorCache(STRIDES, offset=0.0)

    def __call__(self, raw_outputs: Sequence[Tensor], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1, global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: per stride level (8, 16, 32) ``[B, nc + 4 (reg_max + 1), H, W]``: class
                logits, then the scaled box-distribution logits (``DamoYoloNet.raw_outputs``).
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), normalised boxes; M may be 0.
            normalizer_sum: maps this rank's two normalisers (``[2]``: positives, box weights) to
                their sums over ranks; called exactly once per call. None means one process.
            world_size, global_batch: DDP ranks and images per optimizer step (default B x W).

        Returns:
            ``(loss, items)``: the scalar to backward and the detached ``[3]`` (cls, box, dfl).
        """
        bins = self.reg_max + 1
        flat, shapes, image_hw = flatten_levels(raw_outputs, STRIDES, self.nc + 4 * bins,
                                                f"nc={self.nc} + 4 x {bins} distance bins")
        batch, _, anchors = flat.shape
        global_batch = check_scaling(batch, world_size, global_batch)
        logits = flat[:, :self.nc].transpose(1, 2)                                   # [B, A, nc]
        box_logits = flat[:, self.nc:].reshape(batch, 4, bins, anchors).permute(0, 3, 1, 2)  # [B, A, 4, bins]
        points, strides = self.priors(shapes, device=flat.device, dtype=flat.dtype)
        corners = points * strides
        project = torch.arange(bins, device=flat.device, dtype=flat.dtype)
        dist = box_logits.softmax(-1) @ project * strides                            # [B, A, 4] pixels
        pred_boxes = torch.cat((corners - dist[..., :2], corners + dist[..., 2:]), -1)

        gt = padded_ground_truths(targets, batch, image_hw, flat.device, nc=self.nc)
        scores = logits.sigmoid()
        assigned = self.assigner(scores.detach(), pred_boxes.detach(), corners, strides, gt.labels,
                                 xywh_to_xyxy(gt.boxes), gt.mask)
        fg = assigned.foreground

        soft = torch.zeros_like(logits).scatter_(2, assigned.labels[..., None], assigned.ious[..., None])
        focal = (soft - scores).abs().pow(self.beta)
        cls_sum = (F.binary_cross_entropy_with_logits(logits, soft, reduction="none") * focal).sum()

        weight = scores.detach().amax(-1) * fg                                      # [B, A]
        # Background priors compare their box with itself (weight 0): same ops, finite values.
        target_boxes = torch.where(fg[..., None], assigned.boxes, pred_boxes.detach())
        box_sum = ((1.0 - aligned_giou(pred_boxes, target_boxes)) * weight).sum()
        target_dist = torch.cat((corners - target_boxes[..., :2], target_boxes[..., 2:] - corners), -1) / strides
        dfl_sum = (self._dfl(box_logits, target_dist.clamp(0, self.reg_max - DFL_MARGIN)).sum(-1) * weight).sum()

        norms = global_normalizers(torch.stack((fg.sum().float(), weight.sum())), normalizer_sum)
        cls_gain, box_gain, dfl_gain = self.gains
        items = torch.stack((cls_sum * cls_gain / norms[0], box_sum * box_gain / norms[1],
                             dfl_sum * dfl_gain / (4.0 * norms[1]))) * world_size
        return items.sum() * global_batch, items.detach()

    @staticmethod
    def _dfl(logits: Tensor, target: Tensor) -> Tensor:
        """Per side: cross-entropy against the two bins around ``target``, weighted by closeness."""
        log_probs = logits.log_softmax(-1)
        lower = target.long()
        upper_weight = target - lower
        lower_logp = log_probs.gather(-1, lower[..., None]).squeeze(-1)
        upper_logp = log_probs.gather(-1, (lower + 1)[..., None]).squeeze(-1)
        return -(lower_logp * (1.0 - upper_weight) + upper_logp * upper_weight)
