"""YOLOv9's training loss: the shared task-aligned BCE + CIoU + DFL loss (``layers.dfl_loss``),
with its defaults (topk 10, alpha 0.5, beta 6; gains box 7.5, cls 0.5, dfl 1.5)."""

from __future__ import annotations

from ...layers.dfl_loss import TaskAlignedDFLLoss as Yolo9Loss

__all__ = ["Yolo9Loss"]
