"""YOLOv7 post-processing: the decoded ``predictions`` -> per-image detections (eager)."""

from __future__ import annotations

from torch import Tensor

from ...layers.nms import nms_per_image


def postprocess(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                classes: list[int] | None = None, agnostic: bool = False) -> list[Tensor]:
    """``[B, 4 + nc, A]`` (xyxy input pixels, objectness x class probability) -> per image ``[N, 6]``
    after class-aware NMS (the official ``non_max_suppression`` also scores by obj x cls)."""
    return nms_per_image(predictions, conf=conf, iou=iou, max_det=max_det, classes=classes, agnostic=agnostic)
