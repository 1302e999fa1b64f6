"""The detection confusion matrix: which class each ground-truth box was predicted as.

Rows are the true class, columns the predicted class (the layout of the semantic task's matrix);
index ``nc`` is background. A detection counts when its score is at least ``conf``; each
ground-truth box and each detection is matched at most once, greedily by descending IoU among
pairs above ``iou`` (any classes: a square detected as a circle lands off the diagonal). Then:

- matched pair: ``[true class, predicted class] += 1``;
- ground truth left unmatched (missed): ``[true class, background] += 1``;
- detection left unmatched (false alarm): ``[background, predicted class] += 1``.

The thresholds differ from mAP's on purpose: the matrix describes the model at a deployment
operating point (conf 0.25, IoU 0.45 as Ultralytics users read it), mAP sweeps every score.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from ...layers.boxes import box_iou
from .matching import MetricsInputError


class ConfusionMatrix:
    """Counts over a validation split; ``update`` per image, ``merge`` across ranks."""

    def __init__(self, nc: int, *, conf: float = 0.25, iou: float = 0.45) -> None:
        if nc < 1:
            raise MetricsInputError(f"ConfusionMatrix: nc={nc} must be at least 1 (the number of classes)")
        self.nc, self.conf, self.iou = nc, conf, iou
        self.matrix = np.zeros((nc + 1, nc + 1), dtype=np.int64)

    def update(self, det: Tensor, gt_boxes: Tensor, gt_cls: Tensor) -> None:
        """One image: ``det [N, 6]`` (x1, y1, x2, y2, score, class) and ``gt_boxes [M, 4]`` xyxy
        with ``gt_cls [M]``, all in the same pixel frame."""
        det = det[det[:, 4] >= self.conf].float().cpu()
        gt_boxes, gt_cls = gt_boxes.float().cpu(), gt_cls.long().cpu()
        pred_cls = det[:, 5].long()
        bg = self.nc
        matched_gt = np.zeros(len(gt_cls), bool)
        matched_det = np.zeros(len(det), bool)
        if len(det) and len(gt_cls):
            iou = box_iou(gt_boxes, det[:, :4]).numpy()
            gi, di = np.nonzero(iou > self.iou)
            order = np.argsort(-iou[gi, di], kind="stable")
            for g, d in zip(gi[order], di[order]):
                if not matched_gt[g] and not matched_det[d]:
                    matched_gt[g] = matched_det[d] = True
                    self.matrix[int(gt_cls[g]), int(pred_cls[d])] += 1
        for g in np.flatnonzero(~matched_gt):
            self.matrix[int(gt_cls[g]), bg] += 1
        for d in np.flatnonzero(~matched_det):
            self.matrix[bg, int(pred_cls[d])] += 1

    def merge(self, *matrices: np.ndarray) -> None:
        """Add other ranks' counts (their ``matrix`` arrays)."""
        for other in matrices:
            self.matrix += np.asarray(other, dtype=np.int64)

    def normalized(self) -> np.ndarray:
        """Each row divided by its total: the share of a true class predicted as each column
        (rows without any box stay 0)."""
        totals = self.matrix.sum(axis=1, keepdims=True)
        return np.divide(self.matrix, totals, out=np.zeros(self.matrix.shape), where=totals > 0)
