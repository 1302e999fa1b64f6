"""Depth Anything V2's input geometry: each picture resized keeping its aspect ratio so that both
sides are at least ``imgsz`` and multiples of the patch (the official ``Resize`` with
``keep_aspect_ratio=True``, ``ensure_multiple_of=14``, ``resize_method="lower_bound"`` and cubic
interpolation), and the depth resized back to the picture (bilinear, corners aligned)."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor


def constrain_to_multiple(value: float, multiple: int, minimum: int) -> int:
    """``value`` rounded to a multiple (half to even, as NumPy rounds), raised to the next one when
    that falls below ``minimum``."""
    rounded = int(round(value / multiple) * multiple)
    return int(math.ceil(value / multiple) * multiple) if rounded < minimum else rounded


def network_size(h: int, w: int, imgsz: int, multiple: int = 14) -> tuple[int, int]:
    """The ``(height, width)`` an ``h x w`` picture is resized to: the larger of the two scales
    that bring a side to ``imgsz`` (so both sides reach it), each side a multiple of ``multiple``."""
    scale = max(imgsz / h, imgsz / w)
    return constrain_to_multiple(scale * h, multiple, imgsz), constrain_to_multiple(scale * w, multiple, imgsz)


def resize_picture(pixels: Tensor, size: tuple[int, int]) -> Tensor:
    """RGB ``uint8 [H, W, 3]`` -> ``float32 [3, h, w]`` in [0, 1] (bicubic, not clamped: the cubic
    kernel may overshoot slightly, as the official float resize does)."""
    chw = pixels.permute(2, 0, 1).float().div_(255.0)[None]
    if tuple(chw.shape[-2:]) != size:
        chw = F.interpolate(chw, size=size, mode="bicubic", align_corners=False)
    return chw[0]


def depth_to_picture(depth: Tensor, size: tuple[int, int]) -> Tensor:
    """``[h, w]`` depth at the network's resolution -> ``[H, W]`` at the picture's (bilinear, corners aligned)."""
    if tuple(depth.shape) == size:
        return depth
    return F.interpolate(depth[None, None].float(), size=size, mode="bilinear", align_corners=True)[0, 0]
