"""YOLOv7 training loss (the official ``ComputeLossOTA``): anchor SimOTA assignment, then CIoU box,
objectness and class BCE (eager only, never graphed).

Per level l, over the positive slots of that level (``layers.anchor_ota``):

- box: mean of ``1 - CIoU`` (decoded prediction vs its ground truth), summed over levels;
- obj: BCE of every objectness logit of the level against the positives' detached CIoU (clamped
  at 0; 0 elsewhere), mean over all the level's outputs, times the level balance (4, 1, 0.4);
- cls: BCE of the positives' class logits against one-hot targets, mean over positives x classes,
  summed over levels; only with more than one class (as upstream).

Gains as the official training script scales them: ``box x 3 / levels``, ``obj x (imgsz / 640)^2
x 3 / levels``, ``cls x nc / 80 x 3 / levels`` (imgsz here is the batch's own size). Where one
position is the positive of two ground truths (two slots of one cell), each slot counts in box
and cls, and the objectness target is the larger CIoU (upstream's in-place write keeps whichever
comes last).

Scale and ranks: the per-level positive counts are summed over ranks in one collective (clamped
to 1 after), the objectness means are over known element counts; the loss is ``W * U / N *
global_batch``, which is upstream's ``loss * batch_size`` in one process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ...layers.anchor_ota import AnchorOTAAssigner, AnchorSlots
from ...layers.boxes import aligned_ciou, xywh_to_xyxy
from ...layers.ground_truth import padded_ground_truths
from ...layers.loss_scale import check_scaling, global_normalizers

BALANCE = (4.0, 1.0, 0.4)


class Yolo7Loss:
    """Loss of the IDetect head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        anchors: ``[3, 3, 2]`` anchor sizes in grid units per level (the head's ``anchors`` buffer).
        strides: the levels' strides.
        box, obj, cls: the recipe's gains before the official scaling (p5: 0.05, 0.7, 0.3).
    """

    def __init__(self, nc: int, anchors: Tensor, strides: Sequence[int] = (8, 16, 32), *, box: float = 0.05,
                 obj: float = 0.7, cls: float = 0.3) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        if anchors.shape[0] != len(strides):
            raise ConfigError(f"anchors {tuple(anchors.shape)} must have one row per level ({len(strides)} strides)")
        self.nc, self.strides, self.anchors = nc, tuple(int(s) for s in strides), anchors.detach().float().cpu()
        self.gains = (box, obj, cls)
        self.assigner = AnchorOTAAssigner()

    def scaled_gains(self, imgsz: float) -> tuple[float, float, float]:
        """The official script's scaling of the recipe gains to levels, classes and image size."""
        box, obj, cls = self.gains
        levels = 3.0 / len(self.strides)
        return box * levels, obj * (imgsz / 640.0) ** 2 * levels, cls * self.nc / 80.0 * levels

    def __call__(self, raw: Sequence[Tensor], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1, global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw: per level ``[B, 3, H, W, 5 + nc]`` raw logits (``Yolo7Net.raw_outputs``).
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), normalised boxes.
            normalizer_sum: maps this rank's per-level positive counts ``[levels]`` to their sums
                over ranks; called exactly once per call. None means one process.

        Returns:
            ``(loss, items)``: the scalar to backward and the detached ``[3]`` (box, obj, cls).
        """
        raw = self._check(raw)
        batch = raw[0].shape[0]
        global_batch = check_scaling(batch, world_size, global_batch)
        image_hw = (raw[0].shape[2] * self.strides[0], raw[0].shape[3] * self.strides[0])
        gt = padded_ground_truths(targets, batch, image_hw, raw[0].device, nc=self.nc)
        slots = self.assigner.slots(list(raw), self.anchors.to(raw[0].device), self.strides, gt.boxes, gt.mask)
        fg, gt_index = self.assigner.match(slots, gt.labels, gt.boxes, gt.mask)
        target_boxes = xywh_to_xyxy(gt.boxes.gather(1, gt_index[..., None].expand(-1, -1, 4)))
        ciou = aligned_ciou(slots.boxes, torch.where(fg[..., None], target_boxes, slots.boxes.detach()))
        labels = gt.labels.gather(1, gt_index)

        counts = torch.stack([(fg & (slots.level == i)).sum() for i in range(len(raw))]).float()
        norms = global_normalizers(counts, normalizer_sum)
        box_sum = torch.zeros((), device=raw[0].device)
        obj_sum = torch.zeros((), device=raw[0].device)
        cls_sum = torch.zeros((), device=raw[0].device)
        one_hot = torch.zeros_like(slots.logits[..., 1:]).scatter_(-1, labels[..., None], 1.0)
        cls_per_slot = F.binary_cross_entropy_with_logits(slots.logits[..., 1:], one_hot, reduction="none").sum(-1)
        for i, p in enumerate(raw):
            here = (fg & (slots.level == i)).float()
            box_sum = box_sum + ((1.0 - ciou) * here).sum() / norms[i]
            if self.nc > 1:
                cls_sum = cls_sum + (cls_per_slot * here).sum() / (norms[i] * self.nc)
            obj_sum = obj_sum + BALANCE[i] * self._objectness(p, slots, i, ciou.detach().clamp(min=0) * here)
        box_gain, obj_gain, cls_gain = self.scaled_gains(float(image_hw[0]))
        # box and cls: W x U / N (N summed over ranks); obj: a mean over this rank's own outputs,
        # which equals W x U / (W x n) when every rank holds the same batch (DDP's).
        items = torch.stack((box_sum * box_gain * world_size, obj_sum * obj_gain, cls_sum * cls_gain * world_size))
        return items.sum() * global_batch, items.detach()

    @staticmethod
    def _objectness(p: Tensor, slots: AnchorSlots, level: int, quality: Tensor) -> Tensor:
        """Mean BCE of the level's objectness logits against the positives' quality (max per cell)."""
        b, na, h, w = p.shape[:4]
        in_level = slots.level == level
        index = torch.where(in_level, slots.anchor * h * w + slots.gj * w + slots.gi, torch.zeros_like(slots.gi))
        target = torch.zeros(b, na * h * w, device=p.device, dtype=quality.dtype)
        target.scatter_reduce_(1, index, quality * in_level, reduce="amax", include_self=True)
        return F.binary_cross_entropy_with_logits(p[..., 4].float().reshape(b, -1), target, reduction="mean")

    def _check(self, raw: Sequence[Tensor]) -> list[Tensor]:
        if len(raw) != len(self.strides):
            raise ValueError(f"got {len(raw)} head outputs for strides {self.strides}; pass Yolo7Net.raw_outputs")
        for level, p in enumerate(raw):
            if p.dim() != 5 or p.shape[1] != self.anchors.shape[1] or p.shape[-1] != 5 + self.nc:
                raise ValueError(f"head output {level} has shape {tuple(p.shape)}; expected [B, "
                                 f"{self.anchors.shape[1]}, H, W, {5 + self.nc}] (5 + nc={self.nc}): check nc")
        return [p.float() for p in raw]
