"""Points between the network's letterboxed input and the original picture."""

from __future__ import annotations

from torch import Tensor

from ...data.letterbox_images import LetterboxInfo


def points_to_original(points: Tensor, info: LetterboxInfo) -> Tensor:
    """``[N, 4]`` rows (x, y, class, score) in input pixels -> the same rows in pixels of the
    original picture (``(input - pad) / ratio``), clipped to it."""
    h, w = info.orig_shape
    out = points.clone()
    out[:, 0] = ((points[:, 0] - info.pad[0]) / info.ratio).clamp(0, w)
    out[:, 1] = ((points[:, 1] - info.pad[1]) / info.ratio).clamp(0, h)
    return out
