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
RGB_MODE = 3  # torchvision's ImageReadMode.RGB


def _registered() -> bool:
    return hasattr(torch.ops.image, "decode_jpeg")


@functools.cache
def _library() -> bool:
    return _registered() or load_torchvision_library(_IMAGE_LIBRARIES, _registered) is not None


def _operator(name: str, types: list[str]) -> Callable[..., Any] | None:
    """torchvision's image operator ``name`` when its leading arguments have the types ``types``
    (not names: torchvision 0.26 registers some unnamed); None when the library or the operator is
    missing, or its signature changed (then unused)."""
    if not _library() or not hasattr(torch.ops.image, name):
        return None
    op = getattr(torch.ops.image, name)
    return op if [str(a.type) for a in op.default._schema.arguments][:len(types)] == types else None


@functools.cache
def cpu_operator() -> Callable[..., Any] | None:
    """torchvision's libjpeg-turbo decoder (``image::decode_jpeg``), or None."""
    return _operator("decode_jpeg", ["Tensor", "int"])


@functools.cache
def nvjpeg_operator() -> Callable[..., Any] | None:
    """torchvision's nvJPEG batch decoder (``image::decode_jpegs_cuda``: a list of 1-D uint8 CPU
    tensors, a read mode, a CUDA device -> CHW uint8 tensors there) from the same library, or None
    (the library is missing, or built without nvJPEG: the operator then fails when called)."""
    return _operator("decode_jpegs_cuda", ["List[Tensor]", "int", "Device"])


def decode_plain_jpeg(raw: bytes) -> np.ndarray | None:
    """``uint8 [H, W, 3]`` pixels of the JPEG file ``raw``, or None to let PIL decode it.

    The caller has checked the header (three channels, orientation 1, no reduced decode); a file
    that does not end with the end-of-image marker is left to PIL, which reports it truncated
    where libjpeg would fill the missing rows with grey.
    """
    decode_jpeg = cpu_operator()
    if decode_jpeg is None or not raw.rstrip(b"\0").endswith(_END_OF_IMAGE):
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            chw = decode_jpeg(torch.frombuffer(bytearray(raw), dtype=torch.uint8), RGB_MODE)
        except (RuntimeError, ValueError):
            return None
    if caught:  # libjpeg complained (corrupt data it decoded anyway)
        return None
    return np.ascontiguousarray(chw.permute(1, 2, 0).numpy())
