"""SegFormer's post-processing: the captured seam already made the class maps; split them."""

from __future__ import annotations

from torch import Tensor


def split_class_maps(class_maps: Tensor) -> list[Tensor]:
    """``int64 [B, H, W]`` -> one ``[H, W]`` class map per image (input resolution)."""
    return list(class_maps.unbind(0))
