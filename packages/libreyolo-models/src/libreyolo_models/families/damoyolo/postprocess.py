"""DAMO-YOLO post-processing: the decoded ``predictions`` -> per-image detections (eager)."""

from __future__ import annotations

from torch import Tensor

from ...layers.nms import nms_per_image


def postprocess(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                classes: list[int] | None = None, agnostic: bool = False) -> list[Tensor]:
    """``[B, 4 + nc, A]`` (xyxy input pixels, sigmoid scores) -> per image ``[N, 6]`` detections
    after class-aware NMS. One candidate per prior (its best class); upstream's ``multiclass_nms``
    lets a prior enter once per class above ``conf``."""
    return nms_per_image(predictions, conf=conf, iou=iou, max_det=max_det, classes=classes, agnostic=agnostic)
