"""Verify image files before training: each is decoded once, fully, by the one decoder.

The promise downstream code relies on: every image in a ``SplitIndex`` decodes, to the pixels
training will see. Cheaper checks (parsing headers, looking for the JPEG end marker) miss files
whose middle is corrupt: those open, verify and end correctly, then fail when decoded. So each
image is decoded by ``decode.read_image_file``, the same function the image cache and predict
use. The cost is paid once: the verdicts are stored in the split's label cache and reused until a
file's size or mtime changes.

One oddity is kept as a note rather than an error: a JPEG that decodes but does not end with its
end-of-image marker ``FFD9`` (data appended by a camera, or a file cut exactly at a boundary).

Sizes honour the EXIF orientation tag, as labels do: annotation tools show the rotated image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import decode
from .decode import IMAGE_SUFFIXES, ImageDecodeError

__all__ = ["IMAGE_SUFFIXES", "ImageCheck", "check_image", "is_image_path"]

_JPEG_START = b"\xff\xd8"
_JPEG_END = b"\xff\xd9"


@dataclass(frozen=True)
class ImageCheck:
    """The verdict on one image file.

    Attributes:
        size: ``(height, width)`` in pixels after EXIF orientation; None when unusable.
        error: why the image must be skipped, or None.
        note: something odd about a usable image, worth one warning line, or None.
    """

    size: tuple[int, int] | None
    error: str | None = None
    note: str | None = None


def is_image_path(path: Path) -> bool:
    """Whether ``path`` has one of the ``IMAGE_SUFFIXES`` (case-insensitive)."""
    return path.suffix.lower() in IMAGE_SUFFIXES


def check_image(path: Path) -> ImageCheck:
    """Decode ``path`` fully and return its oriented size, or why it cannot be used.

    Never raises for a bad file: the reason goes into ``ImageCheck.error`` so the caller can
    report every bad file at once instead of stopping at the first.
    """
    try:
        _, size = decode.read_image_file(path)
    except ImageDecodeError as err:
        return ImageCheck(None, error=_jpeg_reason(path, err.reason))
    if _is_jpeg(path) and not _ends_with_marker(path):
        return ImageCheck(size, note="JPEG has no end-of-image marker at its end (cut short, or data "
                                     "appended) but decodes; used as is. Re-save it to silence this")
    return ImageCheck(size)


def _jpeg_reason(path: Path, reason: str) -> str:
    """A decode failure of a JPEG without its end marker is a truncated file: say so."""
    if _is_jpeg(path) and not _ends_with_marker(path):
        return f"truncated JPEG: no end-of-image marker, and decoding fails: {reason}"
    return reason


def _is_jpeg(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == _JPEG_START
    except OSError:
        return False


def _ends_with_marker(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64))
            tail = f.read().rstrip(b"\x00")  # zero padding after the marker is harmless
    except OSError:
        return False
    return tail.endswith(_JPEG_END)
