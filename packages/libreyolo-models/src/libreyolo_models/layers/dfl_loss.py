"""The YOLOv9 detection loss: task-aligned assignment, then BCE + CIoU + DFL (eager only, never graphed).

Shared by YOLOv9 and YOLOv9-E2E (whose one-to-one branch runs it a second time with one
candidate per ground truth: ``topk=1``).

Three terms, each a sum over the batch divided by one normalizer N, the sum of all soft class
targets (roughly "how many good positives there are"):

- classification: BCE of the class logits against the assigner's IoU-aware soft targets, over
  every anchor (background anchors learn to say 0);
- box: 1 - CIoU between predicted and assigned boxes, in pixels, weighted by the soft target;
- DFL: cross-entropy of each side's distance distribution against the two bins around the target
  distance, in grid units (the unit the bins count), weighted by the soft target.

Distributed training (why the returned loss is scaled): DDP averages gradients over W ranks. If
each rank divided its own sum U_r by its own N_r, a rank with few positives would weigh its
boxes more than a single process on the whole batch would. Instead N is the sum over ranks
(``normalizer_sum``, an all-reduce-sum in the trainer) and each rank returns
``W * U_r / N * global_batch``; the DDP average is then ``sum_r U_r / N * global_batch``, exactly
the single-process loss of the global batch. The ``global_batch`` factor turns the per-box mean
into a per-image sum, the YOLO convention the default gains and learning rates assume: with
gradient accumulation to a nominal batch ``nbs``, each optimizer step then carries about ``nbs``
images' worth of gradient whatever the batch.

No early return and no data-dependent branch: a rank whose images hold no box runs the same
operations, and its loss depends (with zero weight where there is nothing to learn) on every
element of every head output, so every parameter gets a gradient and DDP's collectives line up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from .anchors import AnchorCache, boxes_to_distances, dfl_expectation, distances_to_boxes
from .assign import Assignment, TaskAlignedAssigner
from .boxes import aligned_ciou, xywh_to_xyxy
from .ground_truth import padded_ground_truths
from .head_maps import flatten_levels
from .loss_scale import check_scaling, global_normalizer


class TaskAlignedDFLLoss:
    """Loss for a YOLOv9-style detect head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        strides: one stride per head level, in the order of ``raw_outputs``.
        reg_max: distance bins per box side (16 for every upstream YOLOv9 checkpoint).
        box, cls, dfl: gains of the three terms.
        topk, alpha, beta: task-aligned assigner settings (candidates per ground truth, exponents
            of class score and IoU in the alignment metric).
    """

    def __init__(self, nc: int, *, strides: Sequence[int] = (8, 16, 32), reg_max: int = 16,
                 box: float = 7.5, cls: float = 0.5, dfl: float = 1.5, topk: int = 10,
                 alpha: float = 0.5, beta: float = 6.0) -> None:
        if nc < 1:
            raise ConfigError(f"nc={nc}: a detector needs at least one class; pass len(names)")
        if reg_max < 2:
            raise ConfigError(f"reg_max={reg_max}: DFL needs at least two bins; YOLOv9 uses 16")
        if not strides or any(s <= 0 for s in strides):
            raise ConfigError(f"strides={tuple(strides)} must be positive, one per head level, e.g. (8, 16, 32)")
        self.nc, self.reg_max, self.strides = nc, reg_max, tuple(int(s) for s in strides)
        self.anchors = AnchorCache(self.strides)
        self.box, self.cls, self.dfl = box, cls, dfl
        self.assigner = TaskAlignedAssigner(topk=topk, alpha=alpha, beta=beta)

    @property
    def channels(self) -> int:
        """Channels each head level must have: box-distribution logits, then class logits."""
        return 4 * self.reg_max + self.nc

    def __call__(self, raw_outputs: Sequence[Tensor], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1, global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: one ``[B, 4 * reg_max + nc, H, W]`` tensor per stride level (any float
                dtype; the loss computes in float32). Channels ``0 .. 4*reg_max-1`` are distance
                logits, side-major (l, t, r, b, each ``reg_max`` bins); the rest are class logits.
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalized to [0, 1]
                of the input image (``H_0 * stride_0`` by ``W_0 * stride_0`` pixels); M may be 0.
                Keep them on the CPU, as the DataLoader yields them: the per-image padding is then
                sized from the data and the rows are checked, at no device cost. On a GPU they are
                padded to M columns per image instead, to avoid reading a count back.
            normalizer_sum: maps this rank's normalizer (a 0-d float32 tensor on the outputs'
                device) to the sum over all ranks, e.g. an all-reduce-sum that returns its
                argument. Called exactly once per call, whatever the targets, so the collective
                lines up on every rank. None means one process (identity).
            world_size: number of ranks whose gradients DDP averages.
            global_batch: images per optimizer step over all ranks; defaults to ``B * world_size``.

        Returns:
            ``(loss, items)``: the scalar to backward, ``W * (U_box + U_cls + U_dfl) / N *
            global_batch`` (gains included), and a detached ``[3]`` tensor (box, cls, dfl) of
            ``W * U / N`` per term: its mean over ranks is the single-process value, and rank 0's
            own items estimate it.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message names which).
            ConfigError: ``world_size`` or ``global_batch`` is below 1.
        """
        sums, local = self.terms(raw_outputs, targets)
        global_batch = check_scaling(raw_outputs[0].shape[0], world_size, global_batch)
        items = sums * (world_size / global_normalizer(local, normalizer_sum))
        return items.sum() * global_batch, items.detach()

    def terms(self, raw_outputs: Sequence[Tensor], targets: Tensor) -> tuple[Tensor, Tensor]:
        """The unnormalised, gained sums ``[3]`` (box, cls, dfl) of one rank's batch and its local
        normalizer (0-d: the sum of the soft class targets). ``__call__`` divides the first by the
        second summed over ranks; a caller combining several heads reduces their normalizers in
        one collective instead (YOLOv9-E2E)."""
        box_logits, cls_logits, anchors, anchor_strides, image_hw = self._flatten(raw_outputs)
        batch = cls_logits.shape[0]
        gt_labels, gt_boxes, gt_mask = self._ground_truths(targets, batch, image_hw, cls_logits.device)

        pred_dist = dfl_expectation(box_logits, self.reg_max).transpose(1, 2)  # [B, A, 4] grid units
        pred_boxes = distances_to_boxes(pred_dist, anchors) * anchor_strides  # xyxy pixels
        assigned = self.assigner(cls_logits.detach().sigmoid(), pred_boxes.detach(), anchors * anchor_strides,
                                 gt_labels, gt_boxes, gt_mask)
        weight = assigned.scores.sum(-1)  # [B, A]; zero on background

        cls_sum = F.binary_cross_entropy_with_logits(cls_logits, assigned.scores, reduction="sum")
        box_sum = self._box_sum(pred_boxes, assigned, weight)
        dfl_sum = self._dfl_sum(box_logits, assigned, anchors, anchor_strides, weight)

        return torch.stack((box_sum * self.box, cls_sum * self.cls, dfl_sum * self.dfl)), assigned.scores.sum()

    def _flatten(self, raw_outputs: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]:
        """Concatenate levels: box logits ``[B, 4R, A]``, class logits ``[B, A, nc]``, anchors, strides."""
        flat, shapes, image_hw = flatten_levels(raw_outputs, self.strides, self.channels,
                                                f"4 * reg_max={self.reg_max} + nc={self.nc}")  # [B, no, A]
        anchors, anchor_strides = self.anchors(shapes, device=flat.device, dtype=flat.dtype)
        split = 4 * self.reg_max
        return flat[:, :split], flat[:, split:].transpose(1, 2), anchors, anchor_strides, image_hw

    def _ground_truths(self, targets: Tensor, batch: int, image_hw: tuple[int, int],
                       device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ground truths on ``device``: labels ``[B, G]``, xyxy pixel boxes ``[B, G, 4]``, mask."""
        gt = padded_ground_truths(targets, batch, image_hw, device, nc=self.nc)
        return gt.labels, xywh_to_xyxy(gt.boxes), gt.mask

    @staticmethod
    def _box_sum(pred_boxes: Tensor, assigned: Assignment, weight: Tensor) -> Tensor:
        """Sum of (1 - CIoU) over positives, weighted; background compares a box with itself (finite)."""
        target = torch.where(assigned.foreground[..., None], assigned.boxes, pred_boxes.detach())
        return ((1.0 - aligned_ciou(pred_boxes, target)) * weight).sum()

    def _dfl_sum(self, box_logits: Tensor, assigned: Assignment, anchors: Tensor,
                 anchor_strides: Tensor, weight: Tensor) -> Tensor:
        """Weighted sum of distribution focal loss, in grid units, averaged over the four sides.

        The target distance t falls between bins floor(t) and floor(t) + 1; the loss is their
        cross-entropy weighted by closeness, minimal when the expectation equals t. Targets are
        clamped just below the last bin, so the upper bin always exists.
        """
        b, _, a = box_logits.shape
        dist = boxes_to_distances(anchors, assigned.boxes / anchor_strides, self.reg_max - 1)
        dist = dist.transpose(1, 2)  # [B, 4, A]
        log_probs = box_logits.view(b, 4, self.reg_max, a).log_softmax(2)
        lower = dist.long()
        upper_weight = dist - lower
        lower_logp = log_probs.gather(2, lower[:, :, None]).squeeze(2)
        upper_logp = log_probs.gather(2, (lower + 1)[:, :, None]).squeeze(2)
        per_side = -(lower_logp * (1.0 - upper_weight) + upper_logp * upper_weight)
        return (per_side.mean(1) * weight).sum()
