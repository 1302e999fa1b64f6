"""YOLOX training loss: SimOTA assignment, then IoU + objectness + class (+ L1) terms (eager only).

Four terms, each a sum over the batch divided by N, the number of positive anchors over all ranks:

- iou: ``1 - IoU²`` between each positive's decoded box and its ground truth (upstream's IoU loss);
- obj: BCE of the objectness logit of every anchor against "is positive";
- cls: BCE of a positive's class logits against the one-hot class scaled by the IoU of its box
  (IoU-aware targets, as upstream), so the class score also learns to rank by localisation;
- l1: ``|t - t*|`` on the raw offsets of positives, where ``t*`` encodes the ground truth the way
  the head decodes (``(c / s - g)`` for the centre, ``log(size / s)`` for the size). Upstream
  switches it on only for the last epochs, when mosaic is closed; ``use_l1`` says whether it is on.

Scaling, DDP and accumulation follow ``layers/loss_scale.py``: each rank returns
``W * U_r / N * global_batch``; the ``global_batch`` factor is why the family's recipe expresses
YOLOX's "0.01 per 64 images" as ``lr0 = 0.01 / 64`` (see ``spec.py``).

No early return and no data-dependent branch: a rank whose images hold no box runs the same
operations, and its loss touches every element of every head output (with zero weight where there
is nothing to learn), so every parameter gets a gradient and DDP's collectives line up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ...layers.anchors import AnchorCache
from ...layers.boxes import aligned_iou, xywh_to_xyxy
from ...layers.ground_truth import padded_ground_truths
from ...layers.head_maps import flatten_levels
from ...layers.loss_scale import check_scaling, global_normalizer
from ...layers.simota import SimOTAAssigner, SimOTAAssignment

L1_EPS = 1e-8  # inside the log of the size target, so a zero-size ground truth stays finite


class YoloxLoss:
    """Loss for the YOLOX head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        strides: one stride per head level, in the order of ``raw_outputs``.
        iou, obj, cls, l1: gains of the four terms (upstream: 5, 1, 1, 1).
        radius: SimOTA's centre region, in strides (upstream: 1.5).
    """

    def __init__(self, nc: int, *, strides: Sequence[int] = (8, 16, 32), iou: float = 5.0, obj: float = 1.0,
                 cls: float = 1.0, l1: float = 1.0, radius: float = 1.5) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        if not strides or any(s <= 0 for s in strides):
            raise ConfigError(f"strides={tuple(strides)} must be positive, one per head level, e.g. (8, 16, 32)")
        self.nc, self.strides = nc, tuple(int(s) for s in strides)
        self.anchors = AnchorCache(self.strides, offset=0.0)
        self.gains = {"iou": iou, "obj": obj, "cls": cls, "l1": l1}
        self.assigner = SimOTAAssigner(radius=radius)

    @property
    def channels(self) -> int:
        """Channels each head level must have: 4 box offsets, objectness, class logits."""
        return 5 + self.nc

    def __call__(self, raw_outputs: Sequence[Tensor], targets: Tensor, *, use_l1: bool = False,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1,
                 global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: one ``[B, 5 + nc, H, W]`` tensor per stride level (any float dtype; the
                loss computes in float32): tx, ty, tw, th, objectness logit, class logits.
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalized to [0, 1]
                of the input image (``H_0 * stride_0`` by ``W_0 * stride_0`` pixels); M may be 0.
                Keep them on the CPU, as the DataLoader yields them (see ``layers.ground_truth``).
            use_l1: add the L1 term on raw offsets (YOLOX's last, mosaic-free epochs); when False
                its item is 0 and it costs nothing.
            normalizer_sum: maps this rank's positive count (0-d float32 on the outputs' device)
                to the sum over all ranks; called exactly once per call. None: one process.
            world_size: number of ranks whose gradients DDP averages.
            global_batch: images per optimizer step over all ranks; defaults to ``B * world_size``.

        Returns:
            ``(loss, items)``: the scalar to backward, ``W * sum(gain * U) / N * global_batch``,
            and a detached float32 ``[4]`` (iou, obj, cls, l1) of ``W * gain * U / N``: their mean
            over ranks is the single-process value.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message names which).
            ConfigError: ``world_size`` or ``global_batch`` is below 1.
        """
        flat, grid, strides, image_hw = self._flatten(raw_outputs)
        batch = flat.shape[0]
        global_batch = check_scaling(batch, world_size, global_batch)
        gt = padded_ground_truths(targets, batch, image_hw, flat.device, nc=self.nc)

        raw_box, obj_logit, cls_logits = flat[..., :4], flat[..., 4], flat[..., 5:]
        pred_boxes = torch.cat(((raw_box[..., :2] + grid) * strides, raw_box[..., 2:].exp() * strides), -1)
        with torch.no_grad():
            joint = (cls_logits.sigmoid() * obj_logit.sigmoid()[..., None]).sqrt()
        assigned = self.assigner(joint, pred_boxes.detach(), (grid + 0.5) * strides, strides, gt.labels, gt.boxes,
                                 gt.mask)
        fg = assigned.foreground.float()

        iou_sum = self._iou_sum(pred_boxes, assigned, fg)
        obj_sum = F.binary_cross_entropy_with_logits(obj_logit, fg, reduction="sum")
        cls_target = torch.zeros_like(cls_logits).scatter_(-1, assigned.labels[..., None], assigned.ious[..., None])
        cls_sum = (F.binary_cross_entropy_with_logits(cls_logits, cls_target, reduction="none").sum(-1) * fg).sum()
        l1_sum = self._l1_sum(raw_box, assigned, grid, strides, fg) if use_l1 else flat.new_zeros(())

        normalizer = global_normalizer(assigned.num_foreground, normalizer_sum)
        g = self.gains
        items = torch.stack((iou_sum * g["iou"], obj_sum * g["obj"], cls_sum * g["cls"], l1_sum * g["l1"]))
        items = items * (world_size / normalizer)
        return items.sum() * global_batch, items.detach()

    def _flatten(self, raw_outputs: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor, tuple[int, int]]:
        """Levels concatenated ``[B, A, 5 + nc]`` (float32), cell corners ``[A, 2]`` and strides ``[A, 1]``."""
        flat, shapes, image_hw = flatten_levels(raw_outputs, self.strides, self.channels,
                                                f"4 box + 1 objectness + nc={self.nc}")
        grid, strides = self.anchors(shapes, device=flat.device, dtype=flat.dtype)
        return flat.transpose(1, 2), grid, strides, image_hw

    @staticmethod
    def _iou_sum(pred_boxes: Tensor, assigned: SimOTAAssignment, fg: Tensor) -> Tensor:
        """Sum of ``1 - IoU²`` over positives; background compares a box with itself (finite, no gradient)."""
        target = torch.where(assigned.foreground[..., None], assigned.boxes, pred_boxes.detach())
        iou = aligned_iou(xywh_to_xyxy(pred_boxes), xywh_to_xyxy(target))
        return ((1.0 - iou.pow(2)) * fg).sum()

    @staticmethod
    def _l1_sum(raw_box: Tensor, assigned: SimOTAAssignment, grid: Tensor, strides: Tensor, fg: Tensor) -> Tensor:
        """Sum over positives of ``|t - t*|`` on the four raw offsets (the head's own encoding)."""
        boxes = assigned.boxes
        target = torch.cat((boxes[..., :2] / strides - grid, torch.log(boxes[..., 2:] / strides + L1_EPS)), -1)
        return ((raw_box - target).abs().sum(-1) * fg).sum()
