"""Turn whatever a user passes to ``model(source)`` into RGB uint8 images with names.

Accepted: a file path, a folder, a glob pattern, a list of any of these, a numpy ``HxWx3`` (or
``HxW`` grayscale) uint8 array in RGB order, a torch tensor ``3xHxW`` / ``Bx3xHxW`` (float in
[0, 1] or uint8), a PIL image. Anything else, a missing file, or an unreadable image raises
``SourceError`` naming the input.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ..data.decode import read_rgb8, to_rgb8
from ..errors import SourceError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


@dataclass(frozen=True)
class SourceImage:
    """One decoded input: ``image`` is RGB uint8 ``[H, W, 3]``; ``name`` is a path or a label."""

    image: np.ndarray
    name: str


def read_image(path: str | Path) -> np.ndarray:
    """Decode an image file to RGB uint8 ``[H, W, 3]``, honouring EXIF orientation (16-bit and
    alpha images as ``data.decode.to_rgb8`` converts them)."""
    path = Path(path)
    if not path.exists():
        raise SourceError(f"image {str(path)!r} does not exist")
    try:
        return read_rgb8(path)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise SourceError(f"cannot read image {str(path)!r}: {err}. Is it a complete image file "
                          f"({', '.join(sorted(IMAGE_SUFFIXES))})?") from None


def expand_paths(source: str | Path) -> list[Path]:
    """A file, a folder (its images, sorted) or a glob pattern -> image paths."""
    text = str(source)
    if any(ch in text for ch in "*?["):
        matches = sorted(Path(p) for p in glob.glob(text, recursive=True))
        files = [p for p in matches if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
        if not files:
            raise SourceError(f"glob {text!r} matched no image files")
        return files
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not files:
            raise SourceError(f"folder {text!r} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        return files
    if not path.exists():
        raise SourceError(f"source {text!r} does not exist (expected an image file, a folder or a glob)")
    return [path]


def _from_array(array: np.ndarray, name: str) -> np.ndarray:
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or min(array.shape[:2]) < 1:
        raise SourceError(f"{name}: numpy image has shape {array.shape}; expected HxWx3 (RGB) or HxW")
    if array.dtype != np.uint8:
        if np.issubdtype(array.dtype, np.floating) and array.size and float(array.max()) <= 1.0:
            array = array * 255.0
        array = np.clip(array, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array[:, :, :3])


def _from_tensor(tensor: torch.Tensor, name: str) -> list[np.ndarray]:
    t = tensor.detach().cpu()
    if t.dim() == 3:
        t = t.unsqueeze(0)
    if t.dim() != 4 or t.shape[1] != 3:
        raise SourceError(f"{name}: tensor has shape {tuple(tensor.shape)}; expected 3xHxW or Bx3xHxW (RGB)")
    if t.is_floating_point():
        t = (t.clamp(0, 1) * 255).round().to(torch.uint8)
    elif t.dtype != torch.uint8:
        raise SourceError(f"{name}: tensor dtype {t.dtype} is not supported; use float in [0, 1] or uint8")
    return [np.ascontiguousarray(img.permute(1, 2, 0).numpy()) for img in t]


def iter_sources(source: object) -> Iterator[SourceImage]:
    """Yield decoded images one at a time (a folder of thousands never sits in memory at once)."""
    items = source if isinstance(source, list | tuple) else [source]
    if not items:
        raise SourceError("the source list is empty")
    for idx, item in enumerate(items):
        label = f"source[{idx}]" if isinstance(source, list | tuple) else "source"
        if isinstance(item, str | Path):
            for path in expand_paths(item):
                yield SourceImage(read_image(path), str(path))
        elif isinstance(item, np.ndarray):
            yield SourceImage(_from_array(item, label), f"{label}.jpg")
        elif isinstance(item, torch.Tensor):
            for j, img in enumerate(_from_tensor(item, label)):
                yield SourceImage(img, f"{label}_{j}.jpg" if item.dim() == 4 else f"{label}.jpg")
        elif isinstance(item, Image.Image):
            yield SourceImage(np.array(to_rgb8(item)), f"{label}.jpg")
        else:
            raise SourceError(f"{label}: unsupported source type {type(item).__name__}; use a path, folder, glob, "
                              "numpy HxWx3 RGB array, torch tensor, PIL image, or a list of these")
