"""Test-time augmentation for detection: ``predict(augment=True)``.

Each batch runs three times in one forward pass: as it is, flipped left-right at 0.83 of the
size, and at 0.67 of the size (the variants Ultralytics users know from ``augment=True``). A
shrunk variant is pasted into the top-left of the same ``S x S`` canvas (grey elsewhere), so all
variants share one input shape: one batch of ``3 B`` images, one graph when graphed. Each
variant's detections are mapped back (divided by the scale, then un-flipped) and merged per
image with class-aware NMS (``layers.box_merge``). Slower by about the variant count, usually a
little better recall, on small and large objects alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.letterbox import FILL
from ..layers.box_merge import merge_detections

VARIANTS: tuple[tuple[float, bool], ...] = ((1.0, False), (0.83, True), (0.67, False))
"""(scale, flipped left-right) of each pass."""


def augment_batch(x: Tensor) -> Tensor:
    """``[B, 3, S, S]`` (uint8 pixels, or float in [0, 1]) -> ``[V * B, 3, S, S]``, variant-major."""
    size = x.shape[-1]
    fill = FILL if x.dtype == torch.uint8 else FILL / 255.0
    out = []
    for scale, flipped in VARIANTS:
        v = x.flip(-1) if flipped else x
        if scale != 1.0:
            side = max(1, int(round(size * scale)))
            small = F.interpolate(v.float(), size=(side, side), mode="bilinear", align_corners=False, antialias=True)
            canvas = torch.full_like(v, fill)
            canvas[..., :side, :side] = small.round().clamp(0, 255).to(v.dtype) if v.dtype == torch.uint8 else small
            v = canvas
        out.append(v)
    return torch.cat(out)


def restore_boxes(det: Tensor, scale: float, flipped: bool, size: int) -> Tensor:
    """A variant's ``[N, 6]`` detections back in the un-augmented input's pixels."""
    det = det.clone()
    det[:, :4] /= scale
    if flipped:
        x1 = det[:, 0].clone()
        det[:, 0] = size - det[:, 2]
        det[:, 2] = size - x1
    return det


def augmented_predictions(x: Tensor, forward: Callable[[Tensor], Any], postprocess: Callable[[Any], list[Tensor]],
                          *, iou: float, max_det: int, agnostic: bool) -> list[Tensor]:
    """Per image of ``x``, the merged detections of every variant, in ``x``'s pixels."""
    batch, size = x.shape[0], x.shape[-1]
    with torch.inference_mode():
        detections = postprocess(forward(augment_batch(x)))
    merged = []
    for i in range(batch):
        rows = [restore_boxes(detections[v * batch + i], scale, flipped, size)
                for v, (scale, flipped) in enumerate(VARIANTS)]
        merged.append(merge_detections(torch.cat(rows), iou=iou, max_det=max_det, agnostic=agnostic))
    return merged
