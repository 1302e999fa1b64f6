"""YOLOX post-processing: the decoded ``predictions`` tensor -> per-image detections (eager)."""

from __future__ import annotations

from torch import Tensor

from ...layers.nms import nms_per_image


def postprocess(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                classes: list[int] | None = None, agnostic: bool = False) -> list[Tensor]:
    """``[B, 4 + nc, A]`` (xyxy input pixels, objectness x class scores) -> per image ``[N, 6]``
    detections (x1, y1, x2, y2, score, class) in input pixels, after class-aware (or agnostic) NMS."""
    return nms_per_image(predictions, conf=conf, iou=iou, max_det=max_det, classes=classes, agnostic=agnostic)
