"""Merging detections of one image that came from several passes (tiles of a large picture,
test-time augmentations): the same object found twice must become one box.

Rows are ``float [N, 6]``: x1, y1, x2, y2 (pixels of one picture), score, class id.

- ``"nms"``: class-aware NMS over all rows; the best-scoring box of each cluster stays as it is.
- ``"weighted"``: the same clusters (the box NMS keeps, and every same-class box overlapping it by
  more than ``iou``), each replaced by its score-weighted mean box with the best score. Boxes
  seen from several tiles or scales then average their small localisation errors.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from .boxes import box_iou
from .nms_kernel import batched_nms, nms

MergeMode = Literal["nms", "weighted"]


def merge_detections(rows: Tensor, *, iou: float, max_det: int, mode: MergeMode = "nms",
                     agnostic: bool = False) -> Tensor:
    """One set of detections from overlapping passes, best first, at most ``max_det``.

    ``agnostic``: boxes of different classes merge too (``agnostic_nms=True``).
    """
    if rows.shape[0] == 0:
        return rows
    boxes, scores = rows[:, :4].double(), rows[:, 4].double()
    kept = nms(boxes, scores, iou) if agnostic else batched_nms(boxes, scores, rows[:, 5], iou)
    kept = kept[:max_det]
    if mode == "nms":
        return rows[kept]
    overlap = box_iou(boxes[kept], boxes)                                  # [K, N]
    members = overlap > iou
    if not agnostic:
        members &= rows[kept, 5][:, None] == rows[None, :, 5]
    weights = members.double() * scores[None, :]
    merged = rows[kept].clone()
    merged[:, :4] = ((weights @ boxes) / weights.sum(1, keepdim=True)).to(rows.dtype)
    return merged

