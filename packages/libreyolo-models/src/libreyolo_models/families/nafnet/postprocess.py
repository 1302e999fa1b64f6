"""NAFNet's post-processing: the restored batch clamped to the image range and split per image."""

from __future__ import annotations

from torch import Tensor


def split_images(restored: Tensor) -> list[Tensor]:
    """``float [B, 3, H, W]`` -> one ``[3, H, W]`` per image, clamped to [0, 1]."""
    return list(restored.float().clamp(0.0, 1.0).unbind(0))
