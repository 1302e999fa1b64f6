"""Input normalisation as a layer, so it runs inside the captured graph with the network.

The constants are non-persistent buffers: they follow ``.to(device, dtype)`` like the weights,
need no host-to-device copy per call, and stay out of state dicts (a torchvision or upstream
checkpoint loads unchanged).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class InputNormalize(nn.Module):
    """``(x - mean) / std`` per channel, for RGB images in [0, 1] ``[B, 3, H, W]``."""

    mean: Tensor
    std: Tensor

    def __init__(self, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std
