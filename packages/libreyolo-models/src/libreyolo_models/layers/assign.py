"""Task-aligned label assignment for anchor-point detectors (eager only: never inside a graph).

Each ground truth picks, among the anchor points lying inside it, the ``topk`` whose current
predictions best combine class score and localisation (alignment = score**alpha * IoU**beta).
An anchor claimed by several ground truths keeps the one its predicted box overlaps most. A
positive anchor's soft class target is its alignment, rescaled so that the best anchor of each
ground truth gets that ground truth's best IoU: the classifier learns to rank by localisation
quality, which is what decides which box survives NMS.

Everything works on whole padded batches (ground truths padded per image, with a mask) and avoids
operations that make the host wait for a GPU (``.item()``, boolean-mask selection, ``nonzero``,
``bincount``, ``one_hot``), so assignment adds no host round trip to a training step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .boxes import aligned_iou


@dataclass(frozen=True)
class Assignment:
    """Per-anchor training targets for ``B`` images, ``A`` anchors and ``C`` classes.

    Attributes:
        labels: ``[B, A]`` int64 class of the assigned ground truth; meaningless on background.
        boxes: ``[B, A, 4]`` xyxy box of the assigned ground truth, in the ground truths' units;
            meaningless on background.
        scores: ``[B, A, C]`` soft class targets in [0, 1]; all-zero rows on background.
        foreground: ``[B, A]`` bool, True where an anchor was given a ground truth.
        gt_index: ``[B, A]`` int64 column of the assigned ground truth in the padded inputs.
    """

    labels: Tensor
    boxes: Tensor
    scores: Tensor
    foreground: Tensor
    gt_index: Tensor


def pad_targets(targets: Tensor, batch_size: int, *, width: int | None = None) -> tuple[Tensor, Tensor]:
    """Group flat per-box rows by image into a padded ``[B, G, D]`` tensor and a ``[B, G]`` mask.

    ``targets`` is ``[M, 1 + D]`` with the image index in column 0 (the collate's layout); each
    image's rows keep their order. ``width`` (G) defaults to the largest per-image count when the
    rows live on the CPU (reading it is free there) and to ``M`` on an accelerator, because reading
    a count back from a GPU would stall it; padding columns are masked out, so both give the same
    assignment. G is at least 1, so a batch without a single box follows the same code path.

    Raises:
        ValueError: the layout is wrong, or (checked on CPU only) an image index is outside
            ``[0, batch_size)`` or ``width`` is too small for some image.
    """
    if targets.dim() != 2 or targets.shape[1] < 2:
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected [M, 1 + D] rows "
                         "(image index first), e.g. [M, 6] = (image, class, cx, cy, w, h)")
    rows, device = targets.shape[0], targets.device
    image = targets[:, 0].long()
    member = image[:, None] == torch.arange(batch_size, device=device)  # [M, B]
    if device.type == "cpu" and rows:
        bad = (image < 0) | (image >= batch_size)
        if bad.any():
            row = int(bad.long().argmax())
            raise ValueError(f"targets row {row} has image index {int(image[row])} but the batch holds "
                             f"{batch_size} images; image indices must be in [0, {batch_size})")
        most = int(member.sum(0).max())  # host tensor: no device round trip
        if width is not None and width < most:
            raise ValueError(f"width={width} is smaller than the {most} boxes of one image; "
                             "pass width=None to size it from the data")
        width = most if width is None else width
    width = max(rows if width is None else width, 1)
    # Row m's column = how many earlier rows belong to the same image.
    slot = (member.long().cumsum(0) - 1).gather(1, image.clamp(0, max(batch_size - 1, 0))[:, None])[:, 0]
    # Scatter into the flattened (image, column) grid: a plain kernel, nothing read back.
    flat_index = image * width + slot
    columns = targets.shape[1] - 1
    padded = targets.new_zeros(batch_size * width, columns)
    padded.scatter_(0, flat_index[:, None].expand(rows, columns), targets[:, 1:])
    mask = torch.zeros(batch_size * width, dtype=torch.bool, device=device)
    mask.scatter_(0, flat_index, torch.ones_like(image, dtype=torch.bool))
    return padded.view(batch_size, width, columns), mask.view(batch_size, width)


def anchors_inside_boxes(points: Tensor, boxes: Tensor, eps: float = 1e-9) -> Tensor:
    """Whether each point ``[A, 2]`` lies strictly inside each xyxy box ``[..., 4]`` -> ``[..., A]``.

    Strictly: a point on an edge (or a zero-area box) never counts, so a degenerate ground truth
    can never claim an anchor.
    """
    x, y = points[:, 0], points[:, 1]
    x1, y1, x2, y2 = (boxes[..., i, None] for i in range(4))
    margin = torch.minimum(torch.minimum(x - x1, y - y1), torch.minimum(x2 - x, y2 - y))
    return margin > eps


class TaskAlignedAssigner:
    """Assign ground truths to anchor points by the task-aligned metric (see the module docstring).

    A plain object, no parameters: the loss owns one. Call it under any grad mode; it never
    records autograd history.
    """

    def __init__(self, *, topk: int = 10, alpha: float = 0.5, beta: float = 6.0, eps: float = 1e-9) -> None:
        if topk < 1:
            raise ConfigError(f"topk={topk} must be >= 1 (candidate anchors per ground truth); 10 is usual")
        if alpha < 0 or beta < 0:
            raise ConfigError(f"alpha={alpha}, beta={beta}: exponents must be >= 0; 0.5 and 6.0 are usual")
        self.topk, self.alpha, self.beta, self.eps = topk, alpha, beta, eps

    @torch.no_grad()
    def __call__(self, pred_scores: Tensor, pred_boxes: Tensor, anchor_points: Tensor,
                 gt_labels: Tensor, gt_boxes: Tensor, gt_mask: Tensor,
                 align_factor: Tensor | None = None) -> Assignment:
        """Assign padded ground truths to the anchors of a batch.

        Args:
            pred_scores: ``[B, A, C]`` class probabilities in [0, 1] (after sigmoid).
            pred_boxes: ``[B, A, 4]`` predicted xyxy boxes, same units as ``gt_boxes``.
            anchor_points: ``[A, 2]`` anchor centres (x, y), same units as ``gt_boxes``.
            gt_labels: ``[B, G]`` integer classes in [0, C) (padding columns may hold any valid class).
            gt_boxes: ``[B, G, 4]`` xyxy ground-truth boxes.
            gt_mask: ``[B, G]`` bool, False on padding columns.
            align_factor: ``[B, G, A]`` in [0, 1] multiplying the alignment metric, or None
                (YOLO-NAS-Pose: the OKS of each anchor's predicted pose with the ground truth's,
                so candidates are chosen and weighted by their keypoints too).

        Returns:
            The :class:`Assignment`; units of ``boxes`` follow ``gt_boxes``.
        """
        b, a, _ = pred_scores.shape
        if pred_boxes.shape != (b, a, 4) or anchor_points.shape != (a, 2):
            raise ValueError(f"pred_boxes {tuple(pred_boxes.shape)} and anchor_points "
                             f"{tuple(anchor_points.shape)} must be [{b}, {a}, 4] and [{a}, 2] to match "
                             f"pred_scores {tuple(pred_scores.shape)}")
        if gt_boxes.shape[1] == 0:  # shape only, known on the host: give argmax one masked column
            gt_labels, gt_boxes = gt_labels.new_zeros(b, 1), gt_boxes.new_zeros(b, 1, 4)
            gt_mask = gt_mask.new_zeros(b, 1)
        labels = gt_labels.long()
        inside = anchors_inside_boxes(anchor_points, gt_boxes) & gt_mask[..., None]  # [B, G, A]
        iou = aligned_iou(gt_boxes[:, :, None], pred_boxes[:, None]) * inside
        class_score = pred_scores.gather(2, labels[:, None, :].expand(b, a, labels.shape[1])).transpose(1, 2)
        align = class_score.pow(self.alpha) * iou.pow(self.beta) * inside  # mask again: 0**0 == 1
        if align_factor is not None:
            align = align * align_factor
        candidates = self._top_candidates(align, inside)
        gt_index, foreground = self._resolve_conflicts(candidates, iou)
        columns = torch.arange(labels.shape[1], device=labels.device)[None, :, None]
        positive = (gt_index[:, None, :] == columns) & foreground[:, None, :]
        quality = self._normalized_alignment(align, iou, positive)
        anchor_labels = labels.gather(1, gt_index)
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(b, a, 4))
        scores = torch.zeros_like(pred_scores).scatter_(2, anchor_labels[..., None], quality[..., None])
        return Assignment(anchor_labels, boxes, scores, foreground, gt_index)

    def _top_candidates(self, align: Tensor, inside: Tensor) -> Tensor:
        """``[B, G, A]`` bool: the ``topk`` best-aligned anchors of each ground truth, inside it.

        When fewer than ``topk`` anchors are inside, topk also returns outside ones (metric 0);
        the ``inside`` mask drops them, so small objects simply get fewer candidates.
        """
        k = min(self.topk, align.shape[-1])
        chosen = torch.zeros_like(inside).scatter_(-1, align.topk(k, dim=-1).indices, True)
        return chosen & inside

    @staticmethod
    def _resolve_conflicts(candidates: Tensor, iou: Tensor) -> tuple[Tensor, Tensor]:
        """One ground truth per anchor: among the anchor's candidates, the highest IoU wins.

        Non-candidates score -1, below any IoU, so a lone candidate wins even at IoU 0; ties go to
        the lower column (argmax returns the first maximum).
        """
        gt_index = torch.where(candidates, iou, torch.full_like(iou, -1.0)).argmax(1)
        return gt_index, candidates.sum(1) > 0  # not .any(): it synchronised on CUDA (pytorch#84291)

    def _normalized_alignment(self, align: Tensor, iou: Tensor, positive: Tensor) -> Tensor:
        """``[B, A]`` soft target: alignment scaled so each ground truth's best anchor gets its best IoU."""
        align = align * positive
        best_align = align.amax(-1, keepdim=True)
        best_iou = (iou * positive).amax(-1, keepdim=True)
        # Each anchor is positive for at most one ground truth, so the max over G picks that one.
        return (align * best_iou / (best_align + self.eps)).amax(1)
