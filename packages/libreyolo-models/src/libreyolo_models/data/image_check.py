"""Verify image files quickly and read their size, so a bad file is found before training.

The promise downstream code relies on: every image in a ``SplitIndex`` decodes. A full decode of
every image would keep that promise but costs seconds per thousand images, so the common formats
get cheaper checks that catch what goes wrong in practice:

- JPEG: opening parses the header segments (``verify()`` adds little for JPEG), then the
  end-of-image marker ``FFD9`` must end the file (trailing zero padding allowed), because a
  truncated JPEG opens fine and fails only when decoded. Without the marker the file is decoded
  once: if that works (data appended after the marker, as some cameras do) it is used with a
  note; if not, it is a truncated JPEG and skipped.
- PNG: ``verify()`` reads every chunk and checks its CRC, which catches truncation.
- Anything else (BMP, WebP, TIFF): decoded fully; they are rare enough for that to be cheap.

Sizes honour the EXIF orientation tag, as labels do: annotation tools show the rotated image,
so loaders must apply the same rotation (``PIL.ImageOps.exif_transpose``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
"""Image file suffixes the readers pick up (compared in lower case)."""

_JPEG_END = b"\xff\xd9"
_EXIF_ORIENTATION = 0x0112
_ROTATED_ORIENTATIONS = {5, 6, 7, 8}  # transposed: width and height swap on display


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
    """Check that ``path`` is a readable, complete image and return its oriented size.

    Never raises for a bad file: the reason goes into ``ImageCheck.error`` so the caller can
    report every bad file at once instead of stopping at the first.
    """
    try:
        with Image.open(path) as im:
            fmt = im.format
            width, height = im.size
            if fmt in ("JPEG", "MPO", "PNG"):  # MPO: multi-picture JPEG from cameras
                orientation = _orientation(im, decoded=False)  # before verify(), which spends `im`
                im.verify()
            else:
                im.load()
                orientation = _orientation(im, decoded=True)
    except UnidentifiedImageError:
        return ImageCheck(None, error="not an image PIL can identify (corrupt or a different format)")
    except OSError as err:  # permission denied, is a directory, I/O error, truncated data
        return ImageCheck(None, error=_read_error(err))
    except (SyntaxError, ValueError, Image.DecompressionBombError) as err:  # PIL's corrupt-file errors
        return ImageCheck(None, error=f"corrupt image: {err}")
    if width < 1 or height < 1:
        return ImageCheck(None, error=f"image has no pixels ({width}x{height})")
    size = (width, height) if orientation in _ROTATED_ORIENTATIONS else (height, width)
    if fmt not in ("JPEG", "MPO"):
        return ImageCheck(size)
    return _check_jpeg_end(path, size)


def _orientation(im: Image.Image, decoded: bool) -> int:
    """The EXIF orientation tag (1 = as stored).

    Undecoded, only the EXIF block found while parsing the header is read: ``getexif()`` on a
    PNG would decode the whole image to look for a late eXIf chunk, and break ``verify()``.
    """
    try:
        if decoded:
            return int(im.getexif().get(_EXIF_ORIENTATION, 1))
        raw = im.info.get("exif")
        if not raw:
            return 1
        exif = Image.Exif()
        exif.load(raw)
        return int(exif.get(_EXIF_ORIENTATION, 1))
    except Exception:  # a broken EXIF block must not reject an image whose pixels are fine
        return 1


def _read_error(err: OSError) -> str:
    if err.strerror:  # errno-style error from opening or reading the file
        return f"cannot read file: {err.strerror}"
    return f"corrupt or truncated image: {err}"


def _check_jpeg_end(path: Path, size: tuple[int, int]) -> ImageCheck:
    """A JPEG must end with FFD9; if not, decide by decoding it once."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64))
            tail = f.read().rstrip(b"\x00")  # zero padding after the marker is harmless
    except OSError as err:
        return ImageCheck(None, error=_read_error(err))
    if tail.endswith(_JPEG_END):
        return ImageCheck(size)
    try:
        with Image.open(path) as im:
            im.load()
    except (OSError, SyntaxError, ValueError) as err:
        return ImageCheck(None, error=f"truncated JPEG: no end-of-image marker and decoding fails ({err})")
    return ImageCheck(size, note="JPEG has no end-of-image marker at its end (cut short, or data "
                                 "appended) but decodes; used as is. Re-save it to silence this")
