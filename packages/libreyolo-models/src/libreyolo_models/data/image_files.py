"""Image files read from disk for a network input: the whole picture, or a reduced decode of a
large JPEG straight to its letterbox size with the full picture kept for later (``ShrunkImage``).

Shared by predict (file sources) and the data pipelines that read files themselves; every
problem is an ``ImageDecodeError`` naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .decode import ImageDecodeError, describe_read_error, read_image_file


def read_image(path: str | Path) -> np.ndarray:
    """Decode an image file to RGB uint8 ``[H, W, 3]`` as a viewer shows it (EXIF, 16-bit, alpha)."""
    return read_image_file(checked_path(path))[0]


@dataclass(frozen=True)
class ShrunkImage:
    """A file decoded for a network input of a known size (``read_image_for``).

    Attributes:
        pixels: RGB uint8 ``[h, w, 3]``: the full picture, or a JPEG decoded at a reduced DCT
            scale straight to its letterbox size (then exactly the image cache's pixels), or
            left at that scale's size for a device to resize (``read_image_for(resize=False)``;
            then ``[h, w, 4]`` where PIL's memory can be handed over as it is, its fourth byte
            padding for the device to drop: ``data.pil_memory``).
        orig_shape: the full picture's ``(h, w)`` after EXIF orientation.
        data: the file's bytes when ``pixels`` is reduced (the full picture decodes from them
            when asked for, not before); None when ``pixels`` is the full picture.
    """

    pixels: np.ndarray
    orig_shape: tuple[int, int]
    name: str
    data: bytes | None = None

    def full(self) -> np.ndarray:
        """The full-size picture (decoded now from the kept bytes when ``pixels`` is reduced)."""
        if self.data is None:
            return self.pixels
        return read_image_file(self.name, data=self.data)[0]


def read_image_for(path: str | Path, imgsz: int, data: bytes | None = None, *, resize: bool = True) -> ShrunkImage:
    """Decode an image file for an ``imgsz`` letterbox: a JPEG at least twice the letterbox size
    decodes at a reduced DCT scale (several times faster, a fraction of the bytes to move), other
    files at full size. The full picture stays available (``ShrunkImage.full``). ``data``: the
    file's bytes, when already read (``read_file_bytes``). ``resize``: the reduced decode is
    resized to the letterbox here (the image cache's pixels); False leaves that to the device the
    pixels go to (predict on CUDA: within a grey level of PIL's resize, and the CPU's slowest part
    of reading a 1080p photograph gone), with the reduced pixels as PIL holds them (``ShrunkImage.pixels``)."""
    resolved = checked_path(path)
    if data is None:
        data = read_file_bytes(resolved)
    pixels, orig_shape = read_image_file(resolved, max_side=imgsz, draft_only=True, data=data, resize=resize,
                                          rgbx=not resize)
    return ShrunkImage(pixels, orig_shape, str(resolved), data if pixels.shape[:2] != orig_shape else None)


def read_file_bytes(path: Path) -> bytes:
    """The bytes of an image file, or ``ImageDecodeError`` naming it and why they cannot be read."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise ImageDecodeError(str(path), describe_read_error(err)) from None


def checked_path(path: str | Path) -> Path:
    """``path`` as a local file that exists (``~`` expanded); URLs and missing files are refused."""
    text = str(path)
    if "://" in text:
        raise ImageDecodeError(text, "unsupported source: URLs are not downloaded; download the file and pass "
                                     "its path")
    resolved = Path(text).expanduser()
    if not resolved.exists():
        raise ImageDecodeError(text, "does not exist (expected an image file, a folder or a glob)")
    return resolved
