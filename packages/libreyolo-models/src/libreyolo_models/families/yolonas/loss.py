"""YOLO-NAS training loss (PP-YOLOE's): task-aligned assignment, then varifocal + GIoU + DFL terms
(eager only, never graphed).

Three terms, each a sum over the batch divided by one normaliser N, the sum of the assigner's soft
class targets (clamped to at least 1):

- cls: varifocal loss of every anchor's class logits against the IoU-aware soft targets (a
  positive's assigned class weighs its target; everything else ``0.75 * p ** 2``);
- iou: ``1 - GIoU`` of each positive's predicted box with its ground truth, weighted by the
  positive's soft target (the sum over classes of its row);
- dfl: distribution focal loss of each side's 17-bin distribution against the distance to the
  ground truth's edge (grid units, clamped to 15.99), averaged over the sides, same weight.

The assigner is ``layers.assign.TaskAlignedAssigner`` with YOLO-NAS's settings (13 candidates,
alpha 1, beta 6). Scale: like RTMDet and unlike the SGD-trained YOLO losses of this zoo, the loss
is the per-normaliser mean upstream trains with (its AdamW recipe does not depend on the loss
scale); DDP follows ``layers/loss_scale.py`` (``W * U_r / N`` with N summed over ranks).

No early return and no data-dependent branch: a rank whose images hold no box runs the same
operations, and its loss touches every head output (zero weight where there is nothing to learn),
so every parameter gets a gradient and the collectives line up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from ...layers.anchors import AnchorCache, boxes_to_distances, dfl_expectation, distances_to_boxes
from ...layers.assign import TaskAlignedAssigner
from ...layers.boxes import aligned_giou, xywh_to_xyxy
from ...layers.dense_losses import distribution_focal_loss, varifocal_loss
from ...layers.ground_truth import padded_ground_truths
from ...layers.head_maps import flatten_levels
from ...layers.loss_scale import check_world_size, global_normalizer
from .nn import BINS, STRIDES


class YoloNasLoss:
    """Loss for the YOLO-NAS heads' raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        cls, iou, dfl: gains of the three terms (upstream: 1.0, 2.5, 0.5).
        topk, alpha, beta: task-aligned assigner settings (upstream: 13, 1.0, 6.0).
    """

    def __init__(self, nc: int, *, cls: float = 1.0, iou: float = 2.5, dfl: float = 0.5, topk: int = 13,
                 alpha: float = 1.0, beta: float = 6.0) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        self.nc = nc
        self.gains = {"cls": cls, "iou": iou, "dfl": dfl}
        self.anchors = AnchorCache(STRIDES)
        self.assigner = TaskAlignedAssigner(topk=topk, alpha=alpha, beta=beta)

    @property
    def channels(self) -> int:
        """Channels each head level must have: 4 x 17 box-side logits, then class logits."""
        return 4 * BINS + self.nc

    def __call__(self, raw_outputs: Sequence[Tensor], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: one ``[B, 68 + nc, H, W]`` map per stride level (8, 16, 32; any float
                dtype, the loss computes in float32): box-side logits (side-major l, t, r, b, 17
                bins each), then class logits.
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised to the
                input image (``H_0 * 8`` by ``W_0 * 8`` pixels); M may be 0. Keep them on the CPU
                (as the DataLoader yields them; see ``layers.ground_truth``).
            normalizer_sum: maps this rank's normaliser (0-d float32) to its sum over ranks;
                called exactly once per call. None: one process.
            world_size: number of ranks whose gradients DDP averages.

        Returns:
            ``(loss, items)``: the scalar to backward, ``W * sum(gain * U) / N``, and a detached
            float32 ``[3]`` (cls, iou, dfl) of ``W * gain * U / N``.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message names which).
            ConfigError: ``world_size`` is below 1.
        """
        check_world_size(world_size)
        flat, shapes, image_hw = flatten_levels(raw_outputs, STRIDES, self.channels,
                                                f"4 x {BINS} box bins + nc={self.nc}")  # [B, C, A]
        points, strides = self.anchors(shapes, device=flat.device, dtype=flat.dtype)  # grid units, [A, 1]
        box_logits, cls_logits = flat[:, :4 * BINS], flat[:, 4 * BINS:].transpose(1, 2)
        batch = flat.shape[0]
        gt = padded_ground_truths(targets, batch, image_hw, flat.device, nc=self.nc)
        gt_boxes = xywh_to_xyxy(gt.boxes)

        pred_grid = distances_to_boxes(dfl_expectation(box_logits, BINS).transpose(1, 2), points)  # [B, A, 4]
        assigned = self.assigner(cls_logits.detach().sigmoid(), pred_grid.detach() * strides, points * strides,
                                 gt.labels, gt_boxes, gt.mask)
        weight = assigned.scores.sum(-1)  # [B, A]; zero on background

        label = torch.zeros_like(cls_logits, dtype=torch.bool).scatter_(2, assigned.labels[..., None], True)
        label &= assigned.foreground[..., None]
        cls_sum = varifocal_loss(cls_logits, assigned.scores, label).sum()
        target_grid = torch.where(assigned.foreground[..., None], assigned.boxes / strides, pred_grid.detach())
        iou_sum = ((1.0 - aligned_giou(pred_grid, target_grid)) * weight).sum()
        dfl_sum = self.dfl_sum(box_logits, points, target_grid, weight)

        normalizer = global_normalizer(assigned.scores.sum(), normalizer_sum)
        g = self.gains
        items = torch.stack((cls_sum * g["cls"], iou_sum * g["iou"], dfl_sum * g["dfl"])) * (world_size / normalizer)
        return items.sum(), items.detach()

    @staticmethod
    def dfl_sum(box_logits: Tensor, points: Tensor, target_grid: Tensor, weight: Tensor) -> Tensor:
        """Weighted sum over anchors of the DFL averaged over the four sides (grid units)."""
        b, _, a = box_logits.shape
        distance = boxes_to_distances(points, target_grid, BINS - 1)  # [B, A, 4] in [0, 15.99]
        logits = box_logits.view(b, 4, BINS, a).permute(0, 3, 1, 2)  # [B, A, 4, BINS]
        return (distribution_focal_loss(logits, distance).mean(-1) * weight).sum()
