"""Any image PIL opens -> 8-bit RGB, the one pixel format every reader, cache and predictor uses.

``Image.convert("RGB")`` alone is wrong for deep images: a 16-bit grayscale PNG (mode ``I;16``)
or a 32-bit one (``I``) is clipped at 255, so most of the picture turns white. Those modes are
scaled from their 16-bit range to 8 bits here instead; float images (``F``) are taken as 0-255
when their values fit, else as 0-1. Alpha (RGBA, LA, palette transparency) is dropped: the
colour channels are kept as stored, which is what annotation tools show on a black canvas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

_DEEP_INTEGER_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


def to_rgb8(image: Image.Image) -> Image.Image:
    """``image`` as an 8-bit RGB PIL image (the input itself when it already is one)."""
    if image.mode == "RGB":
        return image
    if image.mode in _DEEP_INTEGER_MODES or image.mode == "F":
        values = np.asarray(image, dtype=np.float64)
        if image.mode != "F" or float(values.max(initial=0.0)) > 255.0:
            values = values * (255.0 / 65535.0)  # 16-bit range (I: 16-bit data in a 32-bit mode)
        elif float(values.max(initial=0.0)) <= 1.0:
            values = values * 255.0
        gray = np.clip(np.rint(values), 0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(gray[..., None], 3, axis=2))
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")  # PIL warns when a palette with transparency goes straight to RGB
    return image.convert("RGB")


def read_rgb8(path: str | Path) -> np.ndarray:
    """Decode ``path`` to ``uint8 [H, W, 3]`` RGB with its EXIF orientation applied.

    Raises what PIL raises for a missing or corrupt file (``OSError``, ``UnidentifiedImageError``,
    ``SyntaxError``, ``ValueError``); callers turn that into their own error naming the file.
    """
    with Image.open(path) as im:
        return np.array(to_rgb8(ImageOps.exif_transpose(im)))
