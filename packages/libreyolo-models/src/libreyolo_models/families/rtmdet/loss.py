"""RTMDet training loss: dynamic soft-label assignment, then quality focal + GIoU (eager only).

Two terms, each a sum over the batch divided by one normaliser N, the sum of the positives' soft
labels (IoUs):

- cls: quality focal loss of every prior's class logits against the IoU-aware soft target (the
  IoU on the assigned class of a positive, 0 elsewhere), each element weighted by
  ``|target - sigmoid(logit)| ** 2``, so easy elements stop counting;
- box: ``1 - GIoU`` of each positive's predicted box with its ground truth, weighted by its soft
  label, in pixels.

Scale: unlike the YOLO losses of this zoo (a per-image sum, ``x global_batch``), this is
RTMDet's per-positive mean: its recipe (AdamW, lr 0.004 per 256 images) was tuned on it, and
AdamW's steps do not depend on the loss scale anyway.

Distributed training: N is the sum over ranks (``normalizer_sum``, called exactly once per call)
and each rank returns ``W * U_r / N``; DDP's gradient average is then ``sum_r U_r / N``, the loss
of one process on the whole batch. A rank without a single box runs the same operations and its
loss touches every head output (with zero weight where there is nothing to learn), so every
parameter gets a gradient and the collectives line up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ...layers.boxes import aligned_giou, xywh_to_xyxy
from ...layers.ground_truth import padded_ground_truths
from ...layers.loss_scale import check_world_size, global_normalizer
from .assign import DynamicSoftLabelAssigner
from .nn import STRIDES, flatten_levels


class RTMDetLoss:
    """Loss of the RTMDet head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        cls, box: gains of the two terms (upstream: 1.0 and 2.0).
        beta: focusing exponent of the quality focal loss (2.0).
        topk, soft_center_radius, iou_weight: assigner settings (13, 3.0, 3.0).
    """

    def __init__(self, nc: int, *, cls: float = 1.0, box: float = 2.0, beta: float = 2.0, topk: int = 13,
                 soft_center_radius: float = 3.0, iou_weight: float = 3.0) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        self.nc, self.cls, self.box, self.beta = nc, cls, box, beta
        self.assigner = DynamicSoftLabelAssigner(topk=topk, soft_center_radius=soft_center_radius,
                                                 iou_weight=iou_weight)

    def __call__(self, outputs: tuple[Sequence[Tensor], Sequence[Tensor]], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            outputs: ``(cls_scores, distances)``, one tensor per stride level (8, 16, 32): class
                logits ``[B, nc, H, W]`` and l, t, r, b distances in input pixels ``[B, 4, H, W]``
                (any float dtype; the loss computes in float32).
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised to the
                input image (``H_0 * 8`` by ``W_0 * 8`` pixels); M may be 0. Keep them on the CPU
                (as the DataLoader yields them): padding is then sized from the data and the
                classes are checked at no device cost.
            normalizer_sum: maps this rank's normaliser (a 0-d float32 tensor) to its sum over
                ranks; called exactly once per call. None means one process.
            world_size: number of ranks whose gradients DDP averages.

        Returns:
            ``(loss, items)``: the scalar to backward, ``W * (cls * U_cls + box * U_box) / N``, and
            a detached ``[2]`` tensor (cls, box) of the gained terms ``W * gain * U / N``.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message says which).
            ConfigError: ``world_size`` is below 1.
        """
        check_world_size(world_size)
        logits, boxes, priors, strides = self._flatten(outputs)
        batch, device = logits.shape[0], logits.device
        image_hw = (outputs[0][0].shape[2] * STRIDES[0], outputs[0][0].shape[3] * STRIDES[0])
        gt_labels, gt_boxes, gt_mask = self.ground_truths(targets, batch, image_hw, device)
        assigned = self.assigner(logits.detach(), boxes.detach(), priors, strides, gt_labels, gt_boxes, gt_mask)

        soft = torch.zeros_like(logits).scatter_(2, assigned.labels[..., None], assigned.quality[..., None])
        focal = (soft - logits.sigmoid()).abs().pow(self.beta)
        cls_sum = (F.binary_cross_entropy_with_logits(logits, soft, reduction="none") * focal).sum()
        # Background priors compare their box with itself (weight 0): same ops, finite values.
        target_boxes = torch.where(assigned.foreground[..., None], assigned.boxes, boxes.detach())
        box_sum = ((1.0 - aligned_giou(boxes, target_boxes)) * assigned.quality).sum()

        normalizer = global_normalizer(assigned.quality.sum(), normalizer_sum)
        items = torch.stack((cls_sum * self.cls, box_sum * self.box)) * (world_size / normalizer)
        return items.sum(), items.detach()

    def ground_truths(self, targets: Tensor, batch: int, image_hw: tuple[int, int],
                      device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ground truths on ``device`` (see ``layers.ground_truth``): labels ``[B, G]``, xyxy
        pixel boxes ``[B, G, 4]`` (the assigner's layout), mask ``[B, G]``."""
        gt = padded_ground_truths(targets, batch, image_hw, device, nc=self.nc)
        return gt.labels, xywh_to_xyxy(gt.boxes), gt.mask

    def _flatten(self, outputs: tuple[Sequence[Tensor], Sequence[Tensor]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Levels concatenated: logits ``[B, A, nc]``, xyxy boxes ``[B, A, 4]``, priors ``[A, 2]``, strides ``[A]``."""
        if len(outputs) != 2 or len(outputs[0]) != len(STRIDES) or len(outputs[1]) != len(STRIDES):
            raise ValueError(f"expected (cls_scores, distances) with {len(STRIDES)} levels each, the RTMDet "
                             "head's training outputs; got " + _describe(outputs))
        cls_scores, distances = outputs
        batch = cls_scores[0].shape[0]
        for level, (c, d) in enumerate(zip(cls_scores, distances)):
            if c.dim() != 4 or c.shape[:2] != (batch, self.nc) or d.shape != (batch, 4, *c.shape[2:]):
                raise ValueError(f"level {level}: class logits {tuple(c.shape)} and distances {tuple(d.shape)}; "
                                 f"expected [{batch}, {self.nc}, H, W] and [{batch}, 4, H, W]: check that nc "
                                 "matches the model's head")
        return flatten_levels([c.float() for c in cls_scores], [d.float() for d in distances])


def _describe(outputs: object) -> str:
    if isinstance(outputs, (list, tuple)):
        return f"a {type(outputs).__name__} of {len(outputs)} items"
    return type(outputs).__name__
