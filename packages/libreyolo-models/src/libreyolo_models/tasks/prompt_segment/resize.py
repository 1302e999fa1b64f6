"""SAM's input: the picture resized so its longer side is the input side (bilinear with
antialiasing, rounded back to 8-bit values as upstream's PIL resize of the uint8 picture leaves
them), scaled to [0, 1] and padded bottom-right to a square with the pixel mean, which the
network's normalisation turns into exact zeros: upstream pads after normalising, with zeros."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ...contract.classifier_spec import IMAGENET_MEAN
from ...contract.prompts import PromptImage, resized_shape


def square_input(pixels: Tensor, side: int, dtype: torch.dtype) -> tuple[Tensor, PromptImage]:
    """RGB ``uint8 [H, W, 3]`` (on its device) -> ``[3, side, side]`` of ``dtype`` and its geometry."""
    h, w = int(pixels.shape[0]), int(pixels.shape[1])
    nh, nw = resized_shape(h, w, side)
    chw = pixels.permute(2, 0, 1).float()[None]
    if (nh, nw) != (h, w):
        chw = F.interpolate(chw, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
        chw = chw.round_().clamp_(0, 255)
    out = torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device=pixels.device).view(3, 1, 1).to(dtype)
    out = out.expand(3, side, side).clone()
    out[:, :nh, :nw] = (chw[0] / 255.0).to(dtype)
    return out, PromptImage((h, w), (nh, nw), side)
