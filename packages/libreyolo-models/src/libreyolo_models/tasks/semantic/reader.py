"""Read and check a semantic segmentation split: images plus single-channel PNG masks.

Everything that could stop an epoch halfway is found here, before training starts, and reported
with the file's path and the fix: a missing mask, a mask of another size than its image, mask
values outside ``0 .. nc-1`` that are not the ignore value, a colour (RGB / RGBA) mask, an image
that does not decode. Such pairs are left out (one warning line each); a grayscale or RGBA *image*
is used as RGB, with a note. A split with nothing usable is an error.

Splits are listed as for detection (a folder, an image-list ``.txt``, an image, or a list of
those; see ``yolo_reader``); masks sit where ``masks.mask_path_for`` says, in the folder named by
the data.yaml's optional ``masks_dir`` key (default ``masks``).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from ...data import image_check
from ...data.data_config import DataConfig
from ...data.errors import DataConfigError, EmptySplitError
from ...data.split_index import DataProblem
from ...data.yolo_reader import list_split_images
from .mask_files import IGNORE_INDEX, MASKS_DIR, mask_path_for

log = logging.getLogger(__name__)

_SINGLE_CHANNEL = {"L", "P", "I", "I;16", "I;16B", "I;16L", "1"}
_COLOUR = {"RGB", "RGBA", "LA", "RGBX"}
_GRAY = {"L", "I", "I;16", "I;16B", "I;16L", "1", "F"}


@dataclass(frozen=True)
class MaskSplit:
    """One checked split of a semantic dataset: every pair in it decodes and fits.

    Attributes:
        name: split name.
        images, masks: paired paths, in a stable order.
        sizes: per pair, ``(height, width)`` of the image after EXIF orientation (= the mask's).
        names: class id -> name.
        pixels: ``int64 [nc + 1]`` labelled pixels per class over the split, then ignore pixels.
        problems: pairs skipped, and images used with a note.
        source: the data.yaml (or description) it came from.
        masks_dir: the folder name that replaces ``images`` in mask paths.
    """

    name: str
    images: list[Path]
    masks: list[Path]
    sizes: list[tuple[int, int]]
    names: dict[int, str]
    pixels: np.ndarray
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""
    masks_dir: str = MASKS_DIR

    def __len__(self) -> int:
        return len(self.images)

    @property
    def nc(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class _PairCheck:
    size: tuple[int, int] | None
    pixels: np.ndarray | None = None     # int64 [nc + 1]
    error: str | None = None
    notes: tuple[str, ...] = ()


def masks_dir_of(config: DataConfig) -> str:
    """The data.yaml's ``masks_dir`` (a folder name), default ``masks``."""
    value = config.extra.get("masks_dir", MASKS_DIR)
    if not isinstance(value, str) or not value or "/" in value or "\\" in value:
        raise DataConfigError(f"{config.source}: masks_dir={value!r} must be one folder name (it replaces "
                              "'images' in each image's path), e.g. `masks_dir: masks`")
    return value


def read_mask_split(config: DataConfig, split: str) -> MaskSplit:
    """Check every (image, mask) pair of ``split``, log the problems and a summary, index the rest.

    Raises:
        DataConfigError: the split is missing, an entry is a COCO JSON (which holds no masks), or
            the dataset names more classes than a mask can hold.
        EmptySplitError: an entry does not exist, or no pair is usable.
    """
    if config.nc >= IGNORE_INDEX:
        raise DataConfigError(f"{config.source}: {config.nc} classes; semantic masks hold ids 0..254 and "
                              f"{IGNORE_INDEX} for unlabelled pixels, so at most {IGNORE_INDEX} classes")
    masks_dir = masks_dir_of(config)
    entries = config.split_paths(split)
    for entry in entries:
        if not entry.exists():
            raise EmptySplitError(f"{split}: {entry} does not exist (from {split!r} in {config.source}); fix the "
                                  f"path, which is relative to the dataset root {config.root}")
        if entry.suffix.lower() == ".json":
            raise DataConfigError(f"{config.source}: {split} entry {entry} is a COCO JSON file; semantic "
                                  f"segmentation reads PNG masks from a '{masks_dir}' folder beside 'images' "
                                  "(one per image, same stem)")
    images, problems = list_split_images(entries, config.root, split, config.source)
    masks = [mask_path_for(p, masks_dir) for p in images]
    if images and not any(m.is_file() for m in masks):  # one clear error, not one warning per image
        raise EmptySplitError(f"{split}: none of the {len(images)} images has a mask (e.g. {masks[0]} is missing; "
                              f"from {config.source}); semantic masks are single-channel PNGs in a "
                              f"'{masks_dir}' folder beside 'images', one per image with the same stem. "
                              "Is this a detection dataset (labels/*.txt)?")
    with ThreadPoolExecutor() as pool:  # PNG decoding releases the GIL
        checks = list(pool.map(lambda pair: check_pair(pair[0], pair[1], config.nc, config.source),
                               zip(images, masks)))
    kept_images, kept_masks, sizes = [], [], []
    pixels = np.zeros(config.nc + 1, dtype=np.int64)
    for image, mask, check in zip(images, masks, checks):
        if check.error is not None:
            problems.append(DataProblem(image, check.error))
            continue
        problems += [DataProblem(image, note, skipped=False) for note in check.notes]
        kept_images.append(image)
        kept_masks.append(mask)
        sizes.append(check.size)
        if check.pixels is not None:
            pixels += check.pixels
    found = MaskSplit(split, kept_images, kept_masks, sizes, dict(config.names), pixels, problems,  # type: ignore[arg-type]
                      config.source, masks_dir)
    _report(found)
    if not found.images:
        looked = ", ".join(str(e) for e in entries)
        raise EmptySplitError(f"{split}: no usable image + mask pair in {looked} (from {config.source})"
                              + (f": all {len(problems)} were skipped (reasons in the warnings above)" if problems
                                 else "; a split needs images (.jpg, .png, ...) with a mask each in "
                                      f"'{masks_dir}/' beside 'images/'"))
    return found


def check_pair(image: Path, mask: Path, nc: int, source: str) -> _PairCheck:
    """The verdict on one image and its mask (never raises for a bad file)."""
    verdict = image_check.check_image(image)
    if verdict.error is not None:
        return _PairCheck(None, error=verdict.error)
    size = verdict.size
    if size is None:  # check_image gives a size whenever it gives no error
        return _PairCheck(None, error=f"image {image} has no readable size")
    notes = [verdict.note] if verdict.note else []
    mode, raw_size = _image_mode(image)
    if mode in _GRAY:
        notes.append(f"grayscale image (mode {mode}): used as RGB, its one channel repeated")
    elif mode in ("RGBA", "LA", "PA"):
        notes.append(f"image with an alpha channel (mode {mode}): used as RGB, the alpha dropped; save it as "
                     "RGB to silence this")
    if not mask.is_file():
        return _PairCheck(None, error=f"no mask: expected {mask} (the image's path with 'images' replaced by the "
                                      "masks folder and the suffix by .png); add it, or remove the image from "
                                      "the split")
    try:
        values, mask_note = read_mask(mask)
    except (OSError, ValueError, SyntaxError) as err:
        return _PairCheck(None, error=f"mask {mask} cannot be read ({err}); re-save it as a single-channel PNG")
    if values.shape != size:
        hint = (" The image carries an EXIF rotation and the mask matches the unrotated image: rotate the mask "
                "the same way, or strip the image's EXIF orientation." if values.shape == raw_size != size else
                " Re-export the mask at the image's size (resize with nearest-neighbour, never bilinear).")
        return _PairCheck(None, error=f"mask {mask} is {values.shape[1]}x{values.shape[0]} (w x h) but its image "
                                      f"is {size[1]}x{size[0]}; a mask labels its image pixel for pixel.{hint}")
    counts = np.bincount(values.ravel(), minlength=IGNORE_INDEX + 1)
    bad = [int(v) for v in np.flatnonzero(counts) if nc <= v != IGNORE_INDEX]
    if bad:
        shown = ", ".join(map(str, bad[:6])) + (", ..." if len(bad) > 6 else "")
        return _PairCheck(None, error=f"mask {mask} holds class id(s) {shown} outside 0..{nc - 1} (nc={nc} from "
                                      f"{source}) and not {IGNORE_INDEX} (ignore); fix the mask, or list those "
                                      "classes under 'names' in the data.yaml")
    if mask_note:
        notes.append(f"mask {mask}: {mask_note}")
    pixels = np.concatenate((counts[:nc], counts[IGNORE_INDEX:IGNORE_INDEX + 1])).astype(np.int64)
    return _PairCheck(size, pixels, notes=tuple(notes))


def read_mask(path: Path) -> tuple[np.ndarray, str | None]:
    """A mask file's class ids as ``[H, W]`` (``int64`` before range checks), and a note when it
    needed a conversion. PNG palettes (mode ``P``) are read as their indices, not their colours.

    Raises:
        ValueError: a colour mask whose channels differ (a colour-coded label image).
        OSError: the file cannot be decoded.
    """
    with Image.open(path) as im:
        mode = im.mode
        array = np.asarray(im)
    if mode in _SINGLE_CHANNEL:
        return array.astype(np.int64), None
    if mode in _COLOUR:
        channels = array[..., :3] if array.ndim == 3 and array.shape[2] >= 3 else array[..., :1]
        opaque = mode not in ("RGBA", "LA") or bool((array[..., -1] == 255).all())
        if opaque and bool((channels == channels[..., :1]).all()):
            return channels[..., 0].astype(np.int64), (f"a {mode} mask whose channels are equal: read as one "
                                                       "channel; save it as 8-bit grayscale (mode L) to silence this")
    raise ValueError(f"it is a {mode} image whose channels differ, i.e. a colour-coded label image; a mask holds "
                     "one class id per pixel: save it single-channel (PNG mode L, or P with a palette) with "
                     f"ids 0..nc-1 and {IGNORE_INDEX} for unlabelled pixels")


def load_mask(path: Path) -> np.ndarray:
    """A mask checked by ``read_mask_split``, as ``uint8 [H, W]`` (values fit: the scan checked them)."""
    values, _ = read_mask(path)
    return values.astype(np.uint8)


def _image_mode(path: Path) -> tuple[str, tuple[int, int]]:
    """The image's PIL mode and its stored (unrotated) ``(h, w)``: header only, no decode."""
    with Image.open(path) as im:
        return im.mode, (im.size[1], im.size[0])


def _report(split: MaskSplit) -> None:
    for problem in split.problems:
        log.warning("%s: %s %s: %s", split.name, "skipped" if problem.skipped else "used", problem.path,
                    problem.reason)
    skipped = sum(p.skipped for p in split.problems)
    labelled = split.pixels[:-1]
    absent = [split.names[int(i)] for i in np.flatnonzero(labelled == 0)]
    total = max(int(split.pixels.sum()), 1)
    summary = (f"{split.name}: {len(split)} images with masks, {skipped} skipped" + (" (see above)" if skipped else "")
               + f", {split.nc} classes, {100 * int(split.pixels[-1]) / total:.1f}% pixels ignored")
    if absent:
        summary += f"; never labelled here: {', '.join(absent[:8])}" + (" ..." if len(absent) > 8 else "")
    log.info("%s", summary)
