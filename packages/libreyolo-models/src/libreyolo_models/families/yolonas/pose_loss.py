"""YOLO-NAS-Pose training loss (eager only, never graphed): YOLO-NAS's task-aligned assignment made
aware of keypoints, then five terms.

The assignment is ``layers.assign.TaskAlignedAssigner`` (13 candidates, alpha 1, beta 6, as
YOLO-NAS) on the person score and the decoded box, its alignment metric multiplied by the OKS of
each anchor's predicted pose with the ground truth's (SuperGradients' recipe sets
``assigner_multiply_by_pose_oks``): an anchor whose box fits but whose keypoints do not is not
chosen. Each term is a sum over the batch divided by one normaliser N, the sum of the soft targets
(clamped to at least 1, summed over ranks under DDP as ``layers/loss_scale.py`` says):

- cls: quality focal loss of every anchor's person logit against its soft target (the normalised
  alignment on positives, 0 elsewhere);
- iou: ``1 - CIoU`` of each positive's box with its ground truth, weighted by its soft target;
- dfl: distribution focal loss of the box sides (grid units), the same weight;
- pose_cls: focal loss of each positive's keypoint visibility logits against "labelled"
  (``v > 0``), averaged over the keypoints, the same weight;
- pose_reg: ``1 - exp(-e)`` per labelled keypoint with COCO's OKS exponent
  ``e = d^2 / (2 * area * (2 * sigma)^2)`` (``d`` the pixel distance, ``area`` the ground-truth
  box's, ``sigma`` the dataset's per-keypoint OKS sigma), averaged over the labelled keypoints, the
  same weight (the recipe's ``rescale_pose_loss_with_assigned_score``).

Gains (the recipe's): cls 1.0, iou 2.5, dfl 0.01, pose_cls 1.0, pose_reg 34.0. Figures and
choices carried from SuperGradients' published recipe; the code is this project's.

No early return and no data-dependent branch: a rank whose images hold no person runs the same
operations and touches every head output, so every parameter gets a gradient under DDP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ...contract.instances import InstanceTargets
from ...layers.anchors import AnchorCache, dfl_expectation, distances_to_boxes
from ...layers.assign import TaskAlignedAssigner, pad_targets
from ...layers.boxes import aligned_ciou, xywh_to_xyxy
from ...layers.dense_losses import quality_focal_loss
from ...layers.ground_truth import padded_ground_truths
from ...layers.head_maps import flatten_levels
from ...layers.loss_scale import check_world_size, global_normalizer
from .loss import YoloNasLoss
from .nn import BINS, STRIDES
from .pose import decode_keypoints

TERMS = ("cls", "iou", "dfl", "pose_cls", "pose_reg")


def oks_exponent(pred: Tensor, truth: Tensor, area: Tensor, sigmas: Tensor) -> Tensor:
    """COCO's OKS exponent per keypoint, ``d^2 / (2 * area * (2 * sigma)^2)``.

    Args:
        pred, truth: ``[..., K, 2]`` keypoints in pixels (broadcastable).
        area: ``[...]`` the ground truth's area in pixels^2 (broadcastable to the leading dims).
        sigmas: ``[K]`` per-keypoint sigmas.

    Returns:
        ``[..., K]``; ``exp(-e)`` is each keypoint's similarity in (0, 1].
    """
    d2 = (pred - truth).square().sum(-1)
    return d2 / (2.0 * area[..., None].clamp(min=1.0) * (2.0 * sigmas).square())


class YoloNasPoseLoss:
    """Loss for the YOLO-NAS-Pose heads' raw outputs; a plain object (no parameters, no module).

    Args:
        keypoints: keypoints per person (the head's K).
        cls, iou, dfl, pose_cls, pose_reg: gains of the five terms.
        topk, alpha, beta: task-aligned assigner settings (upstream: 13, 1.0, 6.0).
    """

    def __init__(self, keypoints: int, *, cls: float = 1.0, iou: float = 2.5, dfl: float = 0.01,
                 pose_cls: float = 1.0, pose_reg: float = 34.0, topk: int = 13, alpha: float = 1.0,
                 beta: float = 6.0) -> None:
        self.keypoints = keypoints
        self.gains = {"cls": cls, "iou": iou, "dfl": dfl, "pose_cls": pose_cls, "pose_reg": pose_reg}
        self.anchors = AnchorCache(STRIDES)
        self.assigner = TaskAlignedAssigner(topk=topk, alpha=alpha, beta=beta)

    @property
    def channels(self) -> int:
        """Channels each head level has: 4 x 17 box bins, the person logit, K visibility logits,
        2K keypoint offsets."""
        return 4 * BINS + 1 + 3 * self.keypoints

    def __call__(self, raw_outputs: Sequence[Tensor], targets: InstanceTargets, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            raw_outputs: one ``[B, 68 + 1 + 3K, H, W]`` map per stride level (8, 16, 32), as
                ``YoloNasPoseNet.raw_outputs`` returns them.
            targets: the batch's pose targets (boxes normalised, class 0; keypoints ``[M, K, 3]``
                normalised with their visibility; the dataset's OKS sigmas). Keep them on the CPU.
            normalizer_sum: maps this rank's normaliser (0-d float32) to its sum over ranks;
                called exactly once per call. None: one process.
            world_size: number of ranks whose gradients DDP averages.

        Returns:
            ``(loss, items)``: the scalar to backward and a detached float32 ``[5]`` of the terms
            (cls, iou, dfl, pose_cls, pose_reg), each ``W * gain * U / N``.

        Raises:
            ValueError: outputs or targets do not match the head layout (the message names which).
        """
        check_world_size(world_size)
        k = self.keypoints
        flat, shapes, image_hw = flatten_levels(raw_outputs, STRIDES, self.channels,
                                                f"4 x {BINS} box bins + 1 person + 3 x {k} keypoint channels")
        if targets.keypoints is None or targets.keypoints.shape[1:] != (k, 3):
            got = None if targets.keypoints is None else tuple(targets.keypoints.shape)
            raise ValueError(f"pose targets hold keypoints {got}; this head predicts {k} keypoints: [M, {k}, 3]")
        points, strides = self.anchors(shapes, device=flat.device, dtype=flat.dtype)  # grid units, [A, 1]
        box_logits, person, visibility, offsets = flat.split((4 * BINS, 1, k, 2 * k), 1)
        batch, device = flat.shape[0], flat.device
        gt = padded_ground_truths(targets.boxes, batch, image_hw, device, nc=1)
        gt_boxes = xywh_to_xyxy(gt.boxes)  # [B, G, 4] pixels
        gt_points = self._padded_keypoints(targets, batch, image_hw, device)  # [B, G, K, 3] pixels
        sigmas = (targets.sigmas if targets.sigmas is not None else torch.full((k,), 0.1)).to(device).float()

        pred_grid = distances_to_boxes(dfl_expectation(box_logits, BINS).transpose(1, 2), points)  # [B, A, 4]
        pred_points = decode_keypoints(offsets, points, strides).permute(0, 3, 1, 2)  # [B, A, K, 2] pixels
        area = gt.boxes[..., 2] * gt.boxes[..., 3]  # [B, G]
        labelled = gt_points[..., 2] > 0  # [B, G, K]
        oks = self._oks(pred_points.detach()[:, None], gt_points[:, :, None, :, :2], area[..., None],
                        sigmas, labelled[:, :, None])  # [B, G, A]
        assigned = self.assigner(person.detach().sigmoid().transpose(1, 2), pred_grid.detach() * strides,
                                 points * strides, gt.labels, gt_boxes, gt.mask, align_factor=oks)
        target_score = assigned.scores[..., 0]  # [B, A]: zero on background
        weight = target_score

        cls_sum = quality_focal_loss(person[:, 0], target_score).sum()
        target_grid = torch.where(assigned.foreground[..., None], assigned.boxes / strides, pred_grid.detach())
        iou_sum = ((1.0 - aligned_ciou(pred_grid, target_grid)) * weight).sum()
        dfl_sum = YoloNasLoss.dfl_sum(box_logits, points, target_grid, weight)

        index = assigned.gt_index  # [B, A]
        truth = gt_points.gather(1, index[..., None, None].expand(batch, index.shape[1], k, 3))  # [B, A, K, 3]
        truth_area = area.gather(1, index)  # [B, A]
        seen = (truth[..., 2] > 0).float()  # [B, A, K]
        vis_loss = quality_focal_loss(visibility.transpose(1, 2), seen).mean(-1)  # [B, A]
        pose_cls_sum = (vis_loss * weight).sum()
        e = oks_exponent(pred_points, truth[..., :2], truth_area, sigmas)
        per_anchor = ((1.0 - torch.exp(-e)) * seen).sum(-1) / seen.sum(-1).clamp(min=1.0)
        pose_reg_sum = (per_anchor * weight).sum()

        normalizer = global_normalizer(assigned.scores.sum(), normalizer_sum)
        g = self.gains
        items = torch.stack((cls_sum * g["cls"], iou_sum * g["iou"], dfl_sum * g["dfl"],
                             pose_cls_sum * g["pose_cls"], pose_reg_sum * g["pose_reg"])) * (world_size / normalizer)
        return items.sum(), items.detach()

    def _padded_keypoints(self, targets: InstanceTargets, batch: int, image_hw: tuple[int, int],
                          device: torch.device) -> Tensor:
        """``[B, G, K, 3]`` keypoints in pixels (visibility kept), padded in the order and width
        ``padded_ground_truths`` gives the boxes (both pad the same image indices the same way)."""
        k = self.keypoints
        assert targets.keypoints is not None  # checked by the caller
        rows = torch.cat((targets.boxes[:, :1].float(), targets.keypoints.reshape(-1, 3 * k).float()), 1)
        padded, _ = pad_targets(rows, batch)
        height, width = image_hw
        scale = torch.tensor([width, height, 1.0], dtype=torch.float32, device=rows.device)
        return (padded.view(batch, -1, k, 3) * scale).to(device)

    @staticmethod
    def _oks(pred: Tensor, truth: Tensor, area: Tensor, sigmas: Tensor, labelled: Tensor) -> Tensor:
        """Mean OKS over the labelled keypoints, ``[B, G, A]`` (1 where a ground truth has none
        labelled: then the box alone decides, as for a detector)."""
        similarity = torch.exp(-oks_exponent(pred, truth, area, sigmas))  # [B, G, A, K]
        count = labelled.sum(-1)
        mean = (similarity * labelled).sum(-1) / count.clamp(min=1)
        return torch.where(count > 0, mean, torch.ones_like(mean))
