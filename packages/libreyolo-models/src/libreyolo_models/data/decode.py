"""The one image decoder: every picture that enters LibreYOLO becomes 8-bit RGB here.

Training, validation, the dataset check, the image cache and predict all call this module, so a
file decodes to the same pixels wherever it is read, and to what an image viewer would show:

- EXIF orientation is applied (annotation tools show the rotated picture, labels follow it).
- 16-bit pictures (PNG/TIFF ``I;16``, 32-bit ``I``) are scaled to 8 bits, ``v * 255 / 65535``,
  as a viewer maps them: never clipped, which would turn them white.
- Grey, bilevel, palette, CMYK, YCbCr and LAB pictures are converted to RGB.
- Transparency (RGBA, LA, a palette with a transparent colour) is composited over white, as a
  viewer on a white page shows it; the colour under a fully transparent pixel is often junk.
- Float pictures (TIFF mode ``F``) follow the array rule below.

In-memory inputs (numpy arrays, torch tensors) follow one documented rule:

===============  ===========================================================================
dtype            values
===============  ===========================================================================
uint8            0-255, used as is
uint16           0-65535, scaled to 8 bits like a 16-bit file
other integers   must lie in 0-255 (read as 8-bit); anything else is an error
float            [0, 1] (scaled by 255); values beyond 1 are read as 0-255, with one warning per
                 call; negative, non-finite or above-255 values are an error
bool             an error (a mask, not a picture)
===============  ===========================================================================

Shapes: numpy images are ``H x W`` (grey) or ``H x W x C`` with C = 1, 3 (RGB order, not
OpenCV's BGR) or 4 (RGBA), and ``B x H x W x C`` for a batch; tensors are ``H x W``,
``C x H x W`` or ``B x C x H x W`` with C = 1, 3 or 4. An input in the other layout (a
channels-first array, a channels-last tensor) is an error naming the transpose that fixes it,
not a guess.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import SourceError
from .pil_memory import rgbx_view
from .plain_jpeg import decode_plain_jpeg

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".avif"})
"""Image file suffixes that readers and predict pick up (compared in lower case). One list for
training splits, folders and globs alike: a picture predict reads is never left out of a split
(a GIF is read as its first frame; an AVIF needs a Pillow built with it, else it is named as
unreadable)."""

VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".wmv", ".flv", ".mpg", ".mpeg",
                            ".3gp", ".ts"})
"""Suffixes recognised as video, so predict can say "unsupported" rather than "corrupt image"."""

FLOAT_0_255_NOTE = ("float image values go beyond 1, so they are read as 0-255 (float images are "
                    "expected in [0, 1]; divide by 255 to silence this)")
"""The one warning a float input beyond 1 gets (``Notes`` shows it once per call)."""

_16BIT_MAX = 65535
_FLOAT_TOLERANCE = 1e-3  # float noise around 0, 1 and 255 is clipped, not an error
_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
_CHANNELS = (1, 3, 4)
_JPEG_SUFFIXES = frozenset({".jpg", ".jpeg", ".jpe", ".jfif"})


class ImageDecodeError(SourceError):
    """An image cannot be decoded; ``reason`` says why without the name (reports list paths apart).

    Attributes:
        name: the file path or input label.
        reason: what is wrong, and the fix where there is one.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-free rebuild, so the error crosses process boundaries (DataLoader workers).
        return (type(self), (self.name, self.reason))


class Notes:
    """Collects one-time notes about inputs (e.g. the float 0-255 rule) and logs each once."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def add(self, note: str, name: str) -> None:
        """Log ``note`` the first time it is seen, naming the first input it applied to."""
        if note not in self.seen:
            self.seen[note] = name
            log.warning("%s: %s", name, note)


# --------------------------------------------------------------------------- files


def read_image_file(path: str | Path, *, max_side: int | None = None, draft_only: bool = False,
                    data: bytes | None = None, resize: bool = True, rgbx: bool = False
                    ) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode an image file to RGB uint8 as a viewer shows it (see the module docstring).

    Args:
        path: the file (named in errors; read unless ``data`` is given).
        max_side: resize so the long side is ``max_side`` (aspect kept; bilinear with
            antialiasing); large JPEGs are then decoded at a reduced DCT scale first, still at
            least the target size, which is several times faster. None keeps the full size.
        draft_only: apply ``max_side`` only to a JPEG that the reduced DCT scale makes at least
            twice smaller; anything else keeps its full size (predict resizes those on the
            device, where it costs nothing, instead of on the CPU).
        data: the file's bytes, already read.
        resize: False leaves a reduced-scale decode at the DCT scale's size (at least
            ``max_side``, at most twice it) for a device to resize: PIL's resize of a 960 x 540
            draft to 640 x 360 costs half as much again as the draft decode itself.
        rgbx: a reduced decode (only) comes back as ``uint8 [h, w, 4]``, RGB and PIL's padding
            byte, over PIL's own memory where that can be had without a copy
            (``data.pil_memory``): for a device that drops the fourth byte after the upload.

    Returns:
        ``uint8 [h, w, 3]`` pixels (or ``[h, w, 4]``, see ``rgbx``) and the full-size ``(h, w)``
        after EXIF orientation.

    Raises:
        ImageDecodeError: missing, unreadable, not an image, corrupt, truncated, a video, or of
            a mode that cannot be shown; ``reason`` says which.
    """
    path = Path(path)
    name = str(path)
    if path.suffix.lower() in VIDEO_SUFFIXES:
        raise ImageDecodeError(name, f"unsupported source: {path.suffix} is a video; LibreYOLO reads still "
                                     f"images ({', '.join(sorted(IMAGE_SUFFIXES))}); extract frames first")
    try:
        if data is None and path.suffix.lower() in _JPEG_SUFFIXES:
            data = path.read_bytes()  # the fast decoder below reads bytes
        with Image.open(path if data is None else io.BytesIO(data)) as im:
            raw_w, raw_h = im.size
            if raw_w < 1 or raw_h < 1:
                raise ImageDecodeError(name, f"image has no pixels ({raw_w}x{raw_h})")
            ori_h, ori_w = shown_size(im)
            target = _target_size(ori_h, ori_w, max_side)
            jpeg = im.format in ("JPEG", "MPO")
            if target is not None and jpeg:
                ratio = max(target) / max(ori_h, ori_w)
                im.draft(im.mode, (max(1, int(raw_w * ratio + 0.999)), max(1, int(raw_h * ratio + 0.999))))
            if draft_only and (not jpeg or im.size == (raw_w, raw_h)):
                target = None  # no reduced decode to be had: full size, resized where it is cheap
            plain = (data is not None and im.format == "JPEG" and im.mode == "RGB" and im.size == (raw_w, raw_h)
                     and exif_orientation(im) == 1)
            fast = decode_plain_jpeg(data) if plain and data is not None else None
            if fast is not None and target is None:
                return fast, (ori_h, ori_w)
            if fast is not None:
                rgb = Image.fromarray(fast)
            else:
                im.load()
                rgb = to_rgb_image(_oriented(im), name)
    except ImageDecodeError:
        raise
    except UnidentifiedImageError:
        raise ImageDecodeError(name, "not an image PIL can identify (corrupt or a different format)") from None
    except Image.DecompressionBombError as err:
        raise ImageDecodeError(name, f"too large to decode safely ({err})") from None
    except OSError as err:  # permission denied, a directory, I/O errors, truncated or broken data
        raise ImageDecodeError(name, describe_read_error(err)) from None
    except (SyntaxError, ValueError, TypeError, IndexError, MemoryError) as err:  # PIL's corrupt-file errors
        raise ImageDecodeError(name, f"corrupt image: {err}") from None
    if resize and target is not None and rgb.size != (target[1], target[0]):
        rgb = rgb.resize((target[1], target[0]), Image.Resampling.BILINEAR)
    padded = rgbx_view(rgb) if rgbx and (rgb.height, rgb.width) != (ori_h, ori_w) else None  # reduced only
    return (np.asarray(rgb) if padded is None else padded), (ori_h, ori_w)


_EXIF_ORIENTATION = 0x0112
_ROTATED = {5, 6, 7, 8}  # transposed orientations: width and height swap on display


def shown_size(im: Image.Image) -> tuple[int, int]:
    """``(h, w)`` of ``im`` as a viewer shows it: after its EXIF orientation (header only)."""
    w, h = im.size
    return (w, h) if exif_orientation(im) in _ROTATED else (h, w)


def exif_orientation(im: Image.Image) -> int:
    """The EXIF orientation tag (1 = as stored); a broken EXIF block counts as 1.

    Only the EXIF block found while parsing the header is read: ``getexif()`` on a PNG would
    decode the whole image to look for a late eXIf chunk.
    """
    try:
        raw = im.info.get("exif")
        if not raw:
            return 1
        exif = Image.Exif()
        exif.load(raw)
        return int(exif.get(_EXIF_ORIENTATION, 1))
    except Exception:  # a broken EXIF block must not reject an image whose pixels are fine
        return 1


def _oriented(im: Image.Image) -> Image.Image:
    if exif_orientation(im) == 1:
        return im
    try:
        return ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 - a broken EXIF block: show the pixels as stored
        return im


def _target_size(h: int, w: int, max_side: int | None) -> tuple[int, int] | None:
    if max_side is None:
        return None
    ratio = max_side / max(h, w)
    return max(1, round(h * ratio)), max(1, round(w * ratio))


def describe_read_error(err: OSError) -> str:
    """A short reason for an ``OSError`` from opening or decoding a file."""
    if err.strerror:  # errno-style: the file could not be read at all
        return f"cannot read file: {err.strerror}"
    text = str(err)
    if "truncated" in text:
        return f"{text}: the file was cut short (re-copy or re-export it)"
    return f"corrupt or truncated image: {text}"


# --------------------------------------------------------------------------- PIL images


def to_rgb_image(im: Image.Image, name: str) -> Image.Image:
    """Any PIL mode -> an RGB image as a viewer shows it (16-bit scaled, alpha over white).

    Raises:
        ImageDecodeError: a mode that has no sensible picture (e.g. complex data).
    """
    mode = im.mode
    if mode == "RGB":
        return im
    if mode.startswith("I;16") or mode == "I":
        values = np.asarray(im).astype(np.float64)
        grey = np.clip(values, 0, _16BIT_MAX) * (255.0 / _16BIT_MAX)
        return Image.fromarray(np.rint(grey).astype(np.uint8), "L").convert("RGB")
    if mode == "F":
        grey = float_to_uint8(np.asarray(im), name, None)
        return Image.fromarray(grey, "L").convert("RGB")
    if mode == "P" and "transparency" in im.info:
        im, mode = im.convert("RGBA"), "RGBA"
    if mode in _ALPHA_MODES:
        return Image.fromarray(composite_over_white(np.asarray(im.convert("RGBA"))), "RGB")
    try:
        return im.convert("RGB")
    except (ValueError, OSError) as err:
        raise ImageDecodeError(name, f"image mode {mode!r} cannot be shown as RGB ({err})") from None


def composite_over_white(rgba: np.ndarray) -> np.ndarray:
    """``uint8 [H, W, 4]`` -> ``uint8 [H, W, 3]``: the colour over a white page, rounded."""
    rgb = rgba[..., :3].astype(np.uint32)
    alpha = rgba[..., 3:4].astype(np.uint32)
    return ((rgb * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)


def pil_to_rgb8(im: Image.Image, name: str) -> np.ndarray:
    """A PIL image given in memory -> ``uint8 [H, W, 3]``, oriented and converted like a file."""
    try:
        return np.array(to_rgb_image(_oriented(im), name))
    except ImageDecodeError:
        raise
    except (OSError, ValueError, TypeError) as err:
        raise ImageDecodeError(name, f"PIL image (mode {im.mode!r}) cannot be read: {err}") from None


# --------------------------------------------------------------------------- arrays and tensors


def array_to_rgb8(array: np.ndarray, name: str, notes: Notes | None = None) -> np.ndarray:
    """One numpy image (``H x W`` or ``H x W x C``) -> ``uint8 [H, W, 3]`` by the module's rule.

    Raises:
        ImageDecodeError: a shape, dtype or value range outside the rule (the message names it
            and the fix).
    """
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3:
        raise ImageDecodeError(name, f"numpy image has shape {array.shape}; expected HxW (grey), HxWxC "
                                     "(C = 1, 3 RGB or 4 RGBA) or a batch BxHxWxC")
    if array.shape[2] not in _CHANNELS:
        if array.shape[0] in _CHANNELS:
            raise ImageDecodeError(name, f"numpy image has shape {array.shape}, which looks channels-first; "
                                         "numpy images are HxWxC: pass array.transpose(1, 2, 0)")
        raise ImageDecodeError(name, f"numpy image has {array.shape[2]} channels (shape {array.shape}); "
                                     "expected 1 (grey), 3 (RGB) or 4 (RGBA)")
    if min(array.shape[:2]) < 1:
        raise ImageDecodeError(name, f"numpy image has no pixels (shape {array.shape})")
    pixels = _values_to_uint8(array, name, notes)
    if pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    elif pixels.shape[2] == 4:
        pixels = composite_over_white(pixels)
    return np.ascontiguousarray(pixels)


def tensor_to_rgb8(tensor: Any, name: str, notes: Notes | None = None) -> list[np.ndarray]:
    """A torch tensor (``H x W``, ``C x H x W`` or ``B x C x H x W``) -> RGB uint8 images.

    Raises:
        ImageDecodeError: a shape, dtype or value range outside the module's rule.
    """
    import torch

    t = tensor.detach()
    if getattr(t, "is_nested", False):
        raise ImageDecodeError(name, "tensor is nested (images of several sizes); pass a list of CxHxW tensors")
    if t.layout != torch.strided:
        raise ImageDecodeError(name, f"tensor is sparse ({t.layout}); pass a dense one: t.to_dense()")
    if t.device.type == "meta":
        raise ImageDecodeError(name, "tensor is on the 'meta' device: it has a shape but no values; pass one holding "
                                     "pixels")
    if t.is_quantized:
        t = t.dequantize()
    shape = tuple(t.shape)
    if t.dim() == 2:
        t = t[None, None]
    elif t.dim() == 3:
        t = t[None]
    if t.dim() != 4 or t.shape[1] not in _CHANNELS:
        if t.dim() == 4 and t.shape[-1] in _CHANNELS:
            fix = "t.permute(0, 3, 1, 2)" if len(shape) == 4 else "t.permute(2, 0, 1)"
            raise ImageDecodeError(name, f"tensor has shape {shape}, which looks channels-last; tensors are "
                                         f"CxHxW or BxCxHxW: pass {fix}")
        raise ImageDecodeError(name, f"tensor has shape {shape}; expected HxW, CxHxW or BxCxHxW with C = 1, "
                                     "3 (RGB) or 4 (RGBA)")
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    if t.dtype == torch.bool:
        raise ImageDecodeError(name, "tensor is boolean (a mask, not an image); use uint8 or float values")
    if t.is_complex():
        raise ImageDecodeError(name, f"tensor dtype {t.dtype} is complex, not an image")
    arrays = t.cpu().permute(0, 2, 3, 1).numpy()
    return [array_to_rgb8(a, name if len(arrays) == 1 else f"{name}[{i}]", notes) for i, a in enumerate(arrays)]


def _values_to_uint8(array: np.ndarray, name: str, notes: Notes | None) -> np.ndarray:
    kind = array.dtype.kind
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.bool_:
        raise ImageDecodeError(name, "array is boolean (a mask, not an image); use uint8 or float values")
    if array.dtype == np.uint16:
        return np.rint(array.astype(np.float64) * (255.0 / _16BIT_MAX)).astype(np.uint8)
    if kind in "iu":
        lo, hi = int(array.min()), int(array.max())
        if lo < 0 or hi > 255:
            raise ImageDecodeError(name, f"{array.dtype} image holds values {lo}..{hi}; integer images other "
                                         "than uint16 must hold 0-255: convert with .astype(np.uint8), or to "
                                         "uint16 for 16-bit data")
        return array.astype(np.uint8)
    if kind == "f":
        return float_to_uint8(array, name, notes)
    raise ImageDecodeError(name, f"array dtype {array.dtype} is not an image type; use uint8, uint16 or float")


def float_to_uint8(array: np.ndarray, name: str, notes: Notes | None) -> np.ndarray:
    """Floats in [0, 1] (or 0-255, with a note) -> uint8; anything else is an error."""
    values = array.astype(np.float64)
    if not np.isfinite(values).all():
        raise ImageDecodeError(name, "float image holds NaN or infinite values")
    lo, hi = float(values.min()), float(values.max())
    if lo < -_FLOAT_TOLERANCE:
        raise ImageDecodeError(name, f"float image holds negative values (min {lo:.4g}); expected [0, 1] or "
                                     "0-255: undo any normalisation (mean/std) before predicting")
    if hi <= 1 + _FLOAT_TOLERANCE:
        scale = 255.0
    elif hi <= 255 + _FLOAT_TOLERANCE * 255:
        scale = 1.0
        if notes is not None:
            notes.add(FLOAT_0_255_NOTE, name)
        else:
            log.warning("%s: %s", name, FLOAT_0_255_NOTE)
    else:
        raise ImageDecodeError(name, f"float image values reach {hi:.4g}: neither [0, 1] nor 0-255; scale them "
                                     "into [0, 1] first")
    return np.rint(np.clip(values * scale, 0, 255)).astype(np.uint8)
