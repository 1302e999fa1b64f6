"""The deterministic weights and input of the SAM numerics check (``test_sam_family``): the same
rule filled the official code's network when ``data/upstream/vectors-sam-tiny.npz`` was written
(see ``data/upstream/SOURCE-sam.md``). A small encoder (64 wide, 3 blocks, 4 heads, block 1
global, windows of 14, 256 px input: the window padding path runs) with the published prompt
encoder and mask decoder."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

WIDTH, DEPTH, HEADS, GLOBAL, SIDE = 64, 3, 4, (1,), 256


def fill_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every entry, in order, as ``0.05 * sin(0.37 * i + k)`` (i: position in the tensor, k: the
    entry's index); norm weights around 1 so activations keep their scale."""
    out = {}
    for k, (key, value) in enumerate(state.items()):
        wave = 0.05 * torch.sin(torch.arange(value.numel(), dtype=torch.float64) * 0.37 + k)
        if key.endswith("weight") and value.dim() == 1:
            wave = wave + 1.0
        out[key] = wave.to(torch.float32).view(value.shape)
    return out


def reference_input() -> np.ndarray:
    """RGB ``uint8 [192, 256, 3]``: a resized picture (the network's input before padding)."""
    yy, xx = np.mgrid[0:192, 0:256]
    rgb = np.stack([(xx * 3 + yy) % 256, (yy * 5) % 256, (xx * yy // 7) % 256], axis=-1)
    return rgb.astype(np.uint8)
