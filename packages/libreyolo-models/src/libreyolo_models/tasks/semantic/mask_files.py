"""Semantic masks on disk: where an image's mask lives and what its pixels mean.

A mask is a single-channel PNG (mode ``L`` or ``P``; 8 or 16 bit) the same size as its image,
holding one class id per pixel, ``0 .. nc-1``, and ``IGNORE_INDEX`` (255) where nothing is
labelled (borders, unknown regions): those pixels count in neither the loss nor the metrics. It
sits at the image's path with the last ``images`` folder replaced by ``masks`` (or the data.yaml's
``masks_dir``) and the suffix by ``.png``: ``d/images/train/a.jpg`` -> ``d/masks/train/a.png``.
"""

from __future__ import annotations

from pathlib import Path

from ...contract.targets import IGNORE_INDEX

__all__ = ["IGNORE_INDEX", "MASKS_DIR", "MASK_SUFFIX", "mask_path_for"]

MASK_SUFFIX = ".png"
MASKS_DIR = "masks"


def mask_path_for(image: Path, masks_dir: str = MASKS_DIR) -> Path:
    """The mask of ``image``: last ``images`` folder -> ``masks_dir``, suffix -> ``.png``; an image
    outside any ``images`` folder keeps its mask beside it (``a.jpg`` -> ``a.png``; a PNG image then
    needs an ``images`` folder, or its mask would be itself)."""
    parts = image.parts
    for i in range(len(parts) - 2, -1, -1):  # folders only: a file named "images" is not one
        if parts[i] == "images":
            return Path(*parts[:i], masks_dir, *parts[i + 1:]).with_suffix(MASK_SUFFIX)
    return image.with_suffix(MASK_SUFFIX)
