"""Letterboxing for inference: resize keeping the aspect ratio, pad to a fixed square.

Every image of a batch gets the same ``imgsz x imgsz`` canvas, so batched and one-by-one
prediction see identical inputs, and a CUDA graph sees one shape per batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

PAD_VALUE = 114


@dataclass(frozen=True)
class LetterboxInfo:
    """How input pixels map back to the original: ``orig = (input - pad) / ratio``."""

    ratio: float
    pad: tuple[float, float]  # (x, y) padding on the left/top, in input pixels
    orig_shape: tuple[int, int]  # (h, w)


def letterbox(image: np.ndarray, imgsz: int) -> tuple[torch.Tensor, LetterboxInfo]:
    """RGB uint8 ``[H, W, 3]`` -> float ``[3, imgsz, imgsz]`` in [0, 1] plus the mapping."""
    h, w = image.shape[:2]
    ratio = min(imgsz / h, imgsz / w)
    new_h, new_w = max(1, round(h * ratio)), max(1, round(w * ratio))
    chw = torch.from_numpy(image if image.flags.writeable else image.copy()).permute(2, 0, 1).float()
    if (new_h, new_w) != (h, w):
        chw = F.interpolate(chw[None], size=(new_h, new_w), mode="bilinear", align_corners=False,
                            antialias=True)[0].clamp_(0, 255)
    top, left = (imgsz - new_h) // 2, (imgsz - new_w) // 2
    canvas = torch.full((3, imgsz, imgsz), float(PAD_VALUE))
    canvas[:, top:top + new_h, left:left + new_w] = chw
    return canvas.div_(255.0), LetterboxInfo(ratio, (float(left), float(top)), (h, w))
