"""Depth datasets: pictures and their metric depth maps, paired by name.

A ``data.yaml``::

    path: datasets/nyu
    val: {images: val/rgb, depth: val/depth}   # or a folder holding images/ and depth/
    depth_scale: 1000    # depth-map value per metre: NYU's 16-bit PNGs store millimetres; KITTI's 256
    min_depth: 0.001     # the evaluated range, in metres (NYU: 10; KITTI: 80)
    max_depth: 10

A depth map is a 16-bit (or 8-bit) PNG whose value divided by ``depth_scale`` is the distance in
metres, or a ``.npy`` of float metres; 0 (and anything outside the range) is "no measurement" and
not scored. ``images/a.jpg`` pairs with ``depth/a.png`` or ``depth/a.npy``; a picture without a
map, or a map that is not the picture's size, is skipped with a warning naming it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ...data.decode import IMAGE_SUFFIXES
from ...data.description import description_root, read_description
from ...data.errors import DataConfigError, EmptySplitError
from ...data.split_index import DataProblem

log = logging.getLogger(__name__)

NAMES = {0: "depth"}
MAP_SUFFIXES = (".png", ".npy")

_EXAMPLE = ("path: datasets/nyu\n"
            "val: {images: val/rgb, depth: val/depth}   # or a folder holding images/ and depth/\n"
            "depth_scale: 1000   # map value per metre (16-bit PNG in mm)\n"
            "max_depth: 10       # metres")


@dataclass(frozen=True)
class DepthData:
    """A parsed description: per split its picture and depth-map folders, and how to read the maps."""

    root: Path
    splits: dict[str, tuple[Path, Path]]
    source: str
    depth_scale: float = 1000.0
    min_depth: float = 1e-3
    max_depth: float = 10.0
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    @property
    def nc(self) -> int:
        return 1


@dataclass(frozen=True)
class DepthSplit:
    """One checked split: pictures with their depth maps (same size), and how to read the maps."""

    name: str
    images: list[Path]
    depths: list[Path]
    depth_scale: float
    min_depth: float
    max_depth: float
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    def __len__(self) -> int:
        return len(self.images)

    def read_depth(self, index: int) -> np.ndarray:
        """``float32 [H, W]`` metres, NaN where there is no measurement in the evaluated range."""
        return read_depth_map(self.depths[index], self.depth_scale, self.min_depth, self.max_depth)


def read_depth_map(path: Path, scale: float, low: float, high: float) -> np.ndarray:
    if path.suffix.lower() == ".npy":
        depth = np.load(path, allow_pickle=False).astype(np.float32)
    else:
        with Image.open(path) as image:
            depth = np.asarray(image).astype(np.float32) / scale
    if depth.ndim == 3:
        depth = depth[..., 0]
    return np.where((depth >= low) & (depth <= high) & (depth > 0), depth, np.nan).astype(np.float32)


def load_depth_data(data: str | os.PathLike[str] | Mapping[str, Any] | DepthData, *,
                    bundled: str = "shapes-depth") -> DepthData:
    """A depth ``data.yaml`` (a path, a folder holding one, a dict) -> ``DepthData``.

    Raises:
        DataConfigError: a missing or unreadable file, a bad split entry or depth setting.
    """
    if isinstance(data, DepthData):
        return data
    return _from_mapping(*read_description(data, example=_EXAMPLE, bundled=bundled, kind="a depth dataset"))


def _number(raw: Mapping[str, Any], key: str, default: float, source: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise DataConfigError(f"{source}: {key}={value!r} must be a positive number; e.g.\n{_EXAMPLE}")
    return float(value)


def _from_mapping(raw: Mapping[str, Any], base: Path, source: str) -> DepthData:
    root = description_root(raw, base)
    splits = {}
    for split in ("train", "val", "test"):
        value = raw.get(split)
        if value in (None, ""):
            continue
        if isinstance(value, str | os.PathLike):
            splits[split] = (root / Path(value) / "images", root / Path(value) / "depth")
        elif isinstance(value, Mapping) and set(value) == {"images", "depth"}:
            splits[split] = (root / Path(str(value["images"])), root / Path(str(value["depth"])))
        else:
            raise DataConfigError(f"{source}: {split}={value!r} must be a folder holding images/ and depth/, or a "
                                  f"mapping with exactly the keys images and depth; e.g.\n{_EXAMPLE}")
    if not splits:
        raise DataConfigError(f"{source}: no split (train, val or test); e.g.\n{_EXAMPLE}")
    low, high = _number(raw, "min_depth", 1e-3, source), _number(raw, "max_depth", 10.0, source)
    if low >= high:
        raise DataConfigError(f"{source}: min_depth={low} must be below max_depth={high}")
    return DepthData(root, splits, source, _number(raw, "depth_scale", 1000.0, source), low, high)


def read_depth_split(data: DepthData, split: str) -> DepthSplit:
    """Pair the split's pictures with their depth maps (problems logged, then a summary).

    Raises:
        DataConfigError: the description has no such split.
        EmptySplitError: a folder is missing, or no pair is usable.
    """
    if split not in data.splits:
        raise DataConfigError(f"{data.source}: no {split!r} split (it has {', '.join(data.splits)})")
    image_dir, depth_dir = data.splits[split]
    for folder, what in ((image_dir, "images"), (depth_dir, "depth")):
        if not folder.is_dir():
            raise EmptySplitError(f"{split}: the {what} folder {folder} does not exist (from {data.source})")
    maps = {p.stem: p for p in sorted(depth_dir.iterdir()) if p.suffix.lower() in MAP_SUFFIXES}
    images, depths, problems = [], [], []
    for image in sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
        depth = maps.get(image.stem)
        if depth is None:
            problems.append(DataProblem(image, f"no depth map named {image.stem}.png or .npy in {depth_dir}"))
            continue
        try:
            with Image.open(image) as picture:
                size = picture.size[::-1]
            shape = (np.load(depth, mmap_mode="r").shape if depth.suffix.lower() == ".npy"
                     else Image.open(depth).size[::-1])[:2]
        except (OSError, ValueError) as err:
            problems.append(DataProblem(image, f"cannot be read with its depth map {depth.name} ({err})"))
            continue
        if tuple(shape) != tuple(size):
            problems.append(DataProblem(image, f"{size[1]}x{size[0]} picture, but its depth map {depth.name} is "
                                               f"{shape[1]}x{shape[0]}"))
            continue
        images.append(image)
        depths.append(depth)
    for problem in problems:
        log.warning("%s: skipped %s: %s", split, problem.path, problem.reason)
    log.info("%s: %d pictures with depth, %d problems%s", split, len(images), len(problems),
             " (see above)" if problems else "")
    if not images:
        raise EmptySplitError(f"{split}: no picture with a depth map in {image_dir} and {depth_dir} (from "
                              f"{data.source})" + (f": all {len(problems)} were skipped (reasons above)"
                                                   if problems else ""))
    return DepthSplit(split, images, depths, data.depth_scale, data.min_depth, data.max_depth, problems, data.source)
