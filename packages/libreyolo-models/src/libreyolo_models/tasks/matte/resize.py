"""The matte task's geometry: the official inference resizes every picture to ``imgsz x imgsz``
(1024 by default, whatever its aspect ratio) and the predicted alpha back to the picture
(bilinear); both directions live here so predict and validation share them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def alpha_to_picture(alpha: Tensor, size: tuple[int, int]) -> Tensor:
    """``[S, S]`` alpha at the network's resolution -> ``float32 [H, W]`` at the picture's, in [0, 1]."""
    if tuple(alpha.shape) == size:
        return alpha.float()
    return F.interpolate(alpha[None, None].float(), size=size, mode="bilinear", align_corners=False)[0, 0].clamp(0, 1)


def to_network(pixels: Tensor, imgsz: int, device: torch.device) -> Tensor:
    """RGB ``uint8 [H, W, C]`` (or a grey ``[H, W]``) -> ``float32 [C, S, S]`` in [0, 1] on ``device``."""
    chw = pixels.to(device, non_blocking=True)
    chw = (chw[None] if chw.dim() == 2 else chw.permute(2, 0, 1)).float().div_(255.0)[None]
    if tuple(chw.shape[-2:]) != (imgsz, imgsz):
        chw = F.interpolate(chw, size=(imgsz, imgsz), mode="bilinear", align_corners=False, antialias=True)
    return chw[0].clamp_(0.0, 1.0)
