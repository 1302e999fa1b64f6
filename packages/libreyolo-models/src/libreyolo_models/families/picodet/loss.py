"""PicoDet training loss (GFL-style): SimOTA assignment, then varifocal + GIoU + DFL terms (eager only).

Three terms (upstream's, itself PaddleDetection's PicoHead loss):

- cls: varifocal loss of every anchor's class logits against the IoU of its predicted box with its
  ground truth (on the assigned class of a positive; 0 elsewhere), divided by the number of
  positives;
- box: ``1 - GIoU`` of each positive's predicted box with its ground truth, weighted by the
  positive's best class score (detached: the GFL quality weight), divided by the sum of those
  weights;
- dfl: distribution focal loss of each side's 8-bin distribution against the distance to the
  ground truth's edge (grid units, clamped to 6.9), averaged over the sides, same weights.

Assignment is ``layers.simota.SimOTAAssigner`` in its original geometry (``box_or_centre``, centre
radius 2.5 strides, IoU cost weight 6, scores clamped to 1e-7), over cell-centre anchors of the
four levels (strides 8, 16, 32, 64).

Scale, DDP and accumulation follow ``layers/loss_scale.py``: both normalisers (positives, quality
weights) are summed over ranks in one call of ``normalizer_sum`` (a two-element tensor) and each
rank returns ``W * U_r / N * global_batch``: the per-image sum the SGD recipe's learning rate is
written for (see ``spec.py``).

No early return and no data-dependent branch: a rank without a box runs the same operations and
its loss touches every head output, so every parameter gets a gradient and collectives line up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from ...layers.anchors import AnchorCache, boxes_to_distances, dfl_expectation, distances_to_boxes
from ...layers.boxes import aligned_giou, xywh_to_xyxy, xyxy_to_xywh
from ...layers.dense_losses import distribution_focal_loss, varifocal_loss
from ...layers.ground_truth import padded_ground_truths
from ...layers.head_maps import flatten_levels
from ...layers.loss_scale import check_scaling, global_normalizers
from ...layers.simota import SimOTAAssigner
from .nn import BINS, STRIDES

DFL_MARGIN = 0.1  # distance targets stop this far below the last bin (upstream's eps)
MIN_IOU = 1e-6    # a positive's class target is at least this (so it stays a positive)
MIN_WEIGHT = 1e-6  # floor of the quality-weight normaliser (upstream's)


class PicoDetLoss:
    """Loss for the PicoDet head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        cls, box, dfl: gains of the three terms (upstream: 1.0, 2.0, 0.25).
        radius, iou_weight: SimOTA's centre radius (strides) and IoU cost weight (2.5, 6.0).
    """

    def __init__(self, nc: int, *, cls: float = 1.0, box: float = 2.0, dfl: float = 0.25, radius: float = 2.5,
                 iou_weight: float = 6.0) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        self.nc = nc
        self.gains = {"cls": cls, "box": box, "dfl": dfl}
        self.anchors = AnchorCache(STRIDES)
        self.assigner = SimOTAAssigner(radius=radius, iou_weight=iou_weight, region="box_or_centre",
                                       score_eps=1e-7)

    @property
    def channels(self) -> int:
        """Channels each head level must have: class logits, then 4 x 8 box-side logits."""
        return self.nc + 4 * BINS

    def __call__(self, raw_outputs: Sequence[Tensor], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1,
                 global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: one ``[B, nc + 32, H, W]`` map per stride level (8, 16, 32, 64; any float
                dtype, computed in float32): class logits, then box-side logits (side-major).
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised to the
                input image (``H_0 * 8`` by ``W_0 * 8`` pixels); M may be 0. Keep them on the CPU.
            normalizer_sum: maps this rank's two normalisers (``float32 [2]``: positives, quality
                weights) to their sums over ranks; called exactly once per call. None: one process.
            world_size: number of ranks whose gradients DDP averages.
            global_batch: images per optimizer step over all ranks; defaults to ``B * world_size``.

        Returns:
            ``(loss, items)``: the scalar to backward (``W * sum(gain * U / N) * global_batch``) and
            a detached float32 ``[3]`` (cls, box, dfl) of ``W * gain * U / N``.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message names which).
            ConfigError: ``world_size`` or ``global_batch`` is below 1.
        """
        flat, shapes, image_hw = flatten_levels(raw_outputs, STRIDES, self.channels,
                                                f"nc={self.nc} + 4 x {BINS} box bins")  # [B, C, A]
        global_batch = check_scaling(flat.shape[0], world_size, global_batch)
        points, strides = self.anchors(shapes, device=flat.device, dtype=flat.dtype)  # grid units, [A, 1]
        cls_logits, box_logits = flat[:, :self.nc].transpose(1, 2), flat[:, self.nc:]
        gt = padded_ground_truths(targets, flat.shape[0], image_hw, flat.device, nc=self.nc)

        pred_grid = distances_to_boxes(dfl_expectation(box_logits, BINS).transpose(1, 2), points)  # [B, A, 4]
        scores = cls_logits.detach().sigmoid()
        assigned = self.assigner(scores, xyxy_to_xywh(pred_grid.detach() * strides), points * strides, strides,
                                 gt.labels, gt.boxes, gt.mask)
        fg = assigned.foreground

        quality = assigned.ious.clamp(min=MIN_IOU) * fg
        target = torch.zeros_like(cls_logits).scatter_(2, assigned.labels[..., None], quality[..., None])
        cls_sum = varifocal_loss(cls_logits, target, target > 0).sum()
        weight = scores.amax(-1) * fg  # [B, A]
        target_grid = torch.where(fg[..., None], xywh_to_xyxy(assigned.boxes) / strides, pred_grid.detach())
        box_sum = ((1.0 - aligned_giou(pred_grid, target_grid)) * weight).sum()
        b, _, a = box_logits.shape
        distance = boxes_to_distances(points, target_grid, BINS - 1, eps=DFL_MARGIN)
        dfl = distribution_focal_loss(box_logits.view(b, 4, BINS, a).permute(0, 3, 1, 2), distance)
        dfl_sum = (dfl.mean(-1) * weight).sum()

        positives, weights = global_normalizers(torch.stack((fg.sum().float(), weight.sum())), normalizer_sum,
                                                floors=(1.0, MIN_WEIGHT))
        g = self.gains
        items = torch.stack((cls_sum * g["cls"] / positives, box_sum * g["box"] / weights,
                             dfl_sum * g["dfl"] / weights)) * world_size
        return items.sum() * global_batch, items.detach()
