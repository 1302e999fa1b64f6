"""Per-level head maps of dense detectors: the shape checks and the flattening every loss needs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def flatten_levels(raw_outputs: Sequence[Tensor], strides: tuple[int, ...], channels: int,
                   layout: str) -> tuple[Tensor, list[tuple[int, int]], tuple[int, int]]:
    """Check and concatenate the levels of a head.

    Args:
        raw_outputs: one ``[B, channels, H, W]`` map per level, in stride order.
        strides: each level's stride.
        channels: channels every level must have.
        layout: what the channels are, for the error message (``"4 box + 1 objectness + nc=80"``).

    Returns:
        ``(flat, shapes, image_hw)``: float32 ``[B, channels, A]`` (levels concatenated,
        row-major within each), the ``(H, W)`` of each level, and the input size in pixels.

    Raises:
        ValueError: a wrong number of levels or a level of another shape (the message names it).
    """
    if len(raw_outputs) != len(strides):
        raise ValueError(f"got {len(raw_outputs)} head outputs for strides {strides}; pass one "
                         "output per level, or build the loss with strides= matching the head")
    batch = raw_outputs[0].shape[0]
    for level, out in enumerate(raw_outputs):
        if out.dim() != 4 or out.shape[0] != batch or out.shape[1] != channels:
            raise ValueError(f"head output {level} has shape {tuple(out.shape)}; expected [{batch}, {channels}, H, W] "
                             f"({layout}); check that nc matches the model's head")
    flat = torch.cat([out.float().flatten(2) for out in raw_outputs], 2)
    shapes = [(int(out.shape[2]), int(out.shape[3])) for out in raw_outputs]
    return flat, shapes, (shapes[0][0] * strides[0], shapes[0][1] * strides[0])
