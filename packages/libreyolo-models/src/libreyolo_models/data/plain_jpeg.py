"""A faster decode of plain JPEGs, through torchvision's libjpeg-turbo binding.

PIL and torchvision both decode JPEGs with libjpeg-turbo at its default settings (the accurate
integer IDCT, smooth chroma upsampling), so they give the same pixels; torchvision's decoder skips
PIL's image object and its copy into numpy (1.1-1.2x for a whole 720p-1080p photograph here). It
is used only where nothing can differ: a three-channel JPEG at full size, stored upright (EXIF
orientation 1), complete (ending with the end-of-image marker) and decoded without a warning.
Anything else, and any failure, goes through PIL, which names what is wrong.

The decoder is torchvision's ``image::decode_jpeg`` operator from its image library, loaded alone
(``layers.torchvision_library``): importing torchvision would import ``torch._dynamo``, seconds of
CPU that a training run on the CPU must not pay. torchvision 0.29 deprecates its decoders in favour
of TorchCodec; once the library is gone this finds no decoder and PIL decodes everything.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..layers.torchvision_library import load_torchvision_library

_END_OF_IMAGE = b"\xff\xd9"
_IMAGE_LIBRARIES = ("image_stable", "image")  # torchvision 0.25 on, and before
_RGB = 3  # torchvision's ImageReadMode.RGB


def _registered() -> bool:
    return hasattr(torch.ops.image, "decode_jpeg")


@functools.cache
def _decoder() -> Callable[..., Any] | None:
    if not _registered() and load_torchvision_library(_IMAGE_LIBRARIES, _registered) is None:
        return None
    op = torch.ops.image.decode_jpeg
    args = [a.name for a in op.default._schema.arguments]
    return op if args[:2] == ["data", "mode"] else None  # another signature: leave it to PIL


def decode_plain_jpeg(raw: bytes) -> np.ndarray | None:
    """``uint8 [H, W, 3]`` pixels of the JPEG file ``raw``, or None to let PIL decode it.

    The caller has checked the header (three channels, orientation 1, no reduced decode); a file
    that does not end with the end-of-image marker is left to PIL, which reports it truncated
    where libjpeg would fill the missing rows with grey.
    """
    decode_jpeg = _decoder()
    if decode_jpeg is None or not raw.rstrip(b"\0").endswith(_END_OF_IMAGE):
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            chw = decode_jpeg(torch.frombuffer(bytearray(raw), dtype=torch.uint8), _RGB)
        except (RuntimeError, ValueError):
            return None
    if caught:  # libjpeg complained (corrupt data it decoded anyway)
        return None
    return np.ascontiguousarray(chw.permute(1, 2, 0).numpy())
