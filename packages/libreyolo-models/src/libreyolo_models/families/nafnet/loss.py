"""NAFNet's loss: the PSNR loss of the official recipe (``PSNRLoss``, weight 1, mean reduction).

Per image ``10 * log10(mean squared error + 1e-8)`` over its pixels and channels (images in
[0, 1]), averaged over the batch: minimising it maximises each image's PSNR, so every image
counts by its own relative error rather than by its pixel count. The value is negative (it is
minus the PSNR in dB, up to the 1e-8 that keeps a perfect image finite).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

MSE_FLOOR = 1e-8  # the official loss's; a perfect image scores -80 dB instead of -inf


def psnr_loss(restored: Tensor, target: Tensor) -> Tensor:
    """``mean_b 10 * log10(mse_b + 1e-8)`` of ``[B, C, H, W]`` images (float32 arithmetic).

    Raises:
        ValueError: the shapes differ (a target of another size than the network's output).
    """
    if restored.shape != target.shape:
        raise ValueError(f"restored images {tuple(restored.shape)} and targets {tuple(target.shape)} differ in shape")
    error = (restored.float() - target.to(restored.device, non_blocking=True).float()).pow(2).mean(dim=(1, 2, 3))
    return (10.0 / math.log(10.0)) * torch.log(error + MSE_FLOOR).mean()
