"""``Results.masks`` for semantic segmentation: a class map at the original image's size.

The network sees the image letterboxed onto an ``S x S`` square; its class map is cut back to the
image's area and resized to the original size by nearest neighbour (class ids are labels, never
averaged). Validation carries predictions back the same way (``map_to_original``), so the metrics
describe exactly what ``model(image)`` returns.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...data.letterbox_images import LetterboxInfo
from ..drawing import class_color

OVERLAY_ALPHA = 0.5


def map_to_original(class_map: Tensor, info: LetterboxInfo) -> Tensor:
    """An ``[S, S]`` class map of a letterboxed input -> ``[h, w]`` over the original image.

    Args:
        class_map: integer class ids at the network input's resolution.
        info: the letterbox that made the input (ratio, padding, original size).
    """
    h, w = info.orig_shape
    new_h, new_w = max(1, round(h * info.ratio)), max(1, round(w * info.ratio))  # as the letterbox rounded
    left, top = int(info.pad[0]), int(info.pad[1])
    inner = class_map[top:top + new_h, left:left + new_w]
    if inner.shape == (h, w):
        return inner
    resized = F.interpolate(inner[None, None].float(), size=(h, w), mode="nearest-exact")
    return resized[0, 0].to(class_map.dtype)


class SemanticMask:
    """One image's predicted classes.

    ``data`` is ``int64 [H, W]``: the class id of every pixel of the original image.
    """

    def __init__(self, data: Tensor) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.data.shape[0]), int(self.data.shape[1])

    def classes(self) -> list[int]:
        """The class ids present, in increasing order."""
        return [int(c) for c in torch.unique(self.data).tolist()]

    def pixel_shares(self) -> dict[int, float]:
        """Class id -> share of the image's pixels, for the classes present (largest first)."""
        counts = torch.bincount(self.data.flatten().long().cpu())
        total = max(int(counts.sum()), 1)
        shares = {c: int(n) / total for c, n in enumerate(counts.tolist()) if n}
        return dict(sorted(shares.items(), key=lambda kv: -kv[1]))

    def cpu(self) -> SemanticMask:
        return SemanticMask(self.data.cpu())

    def numpy(self) -> np.ndarray:
        return self.data.cpu().numpy()

    def overlay(self, image: np.ndarray, alpha: float = OVERLAY_ALPHA) -> np.ndarray:
        """``image`` (RGB uint8 ``[H, W, 3]``) blended with one colour per class (``class_color``)."""
        ids = self.data.cpu().long()
        palette = torch.tensor([class_color(c) for c in range(int(ids.max()) + 1)], dtype=torch.float32)
        colours = palette[ids].numpy()
        blended = image.astype(np.float32) * (1 - alpha) + colours * alpha
        return np.clip(blended + 0.5, 0, 255).astype(np.uint8)

    def __repr__(self) -> str:
        return f"SemanticMask(shape={self.shape}, classes={self.classes()})"
