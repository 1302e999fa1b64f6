"""A faster decode of plain JPEGs, through torchvision's libjpeg-turbo binding.

PIL and torchvision both decode JPEGs with libjpeg-turbo at its default settings (the accurate
integer IDCT, smooth chroma upsampling), so they give the same pixels; torchvision skips PIL's
image object and its copies, which is about 1.6x faster on a 1080p photograph on this project's
CPU (``tools/probe_decode.py``). It is used only where nothing can differ: a three-channel JPEG at
full size, stored upright (EXIF orientation 1), complete (ending with the end-of-image marker) and
decoded without a warning. Anything else, and any failure, goes through PIL, which names what is
wrong. torchvision 0.29 deprecates its decoders in favour of TorchCodec; once they are gone this
finds no decoder and PIL decodes everything, as before.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

_END_OF_IMAGE = b"\xff\xd9"


@functools.cache
def _decoder() -> tuple[Callable[..., Any], Any] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchvision.io import ImageReadMode, decode_jpeg
    except (ImportError, OSError, RuntimeError):  # no torchvision, or its image library failed to load
        return None
    return decode_jpeg, ImageReadMode.RGB


def decode_plain_jpeg(raw: bytes) -> np.ndarray | None:
    """``uint8 [H, W, 3]`` pixels of the JPEG file ``raw``, or None to let PIL decode it.

    The caller has checked the header (three channels, orientation 1, no reduced decode); a file
    that does not end with the end-of-image marker is left to PIL, which reports it truncated
    where libjpeg would fill the missing rows with grey.
    """
    found = _decoder()
    if found is None or not raw.rstrip(b"\0").endswith(_END_OF_IMAGE):
        return None
    decode_jpeg, rgb = found
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            chw = decode_jpeg(torch.frombuffer(bytearray(raw), dtype=torch.uint8), mode=rgb)
        except (RuntimeError, ValueError):
            return None
    if any(not issubclass(w.category, DeprecationWarning) for w in caught):  # libjpeg complained
        return None
    return np.ascontiguousarray(chw.permute(1, 2, 0).numpy())
