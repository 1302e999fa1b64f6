"""Read a split from a COCO-style JSON file (``train: annotations/instances_train.json``).

What is used from the JSON:

- ``categories``: ``{id, name}``; ids need not be contiguous (COCO's run 1..90 with gaps). They
  map to class ids ``0 .. nc-1`` in sorted id order, and name the classes when data.yaml has no
  ``names``.
- ``images``: ``{id, file_name, width?, height?}``; ``file_name`` is relative to the images
  folder: data.yaml's ``coco_images`` (one folder, or one per split:
  ``coco_images: {train: train2017, val: val2017}``), else ``images/`` beside the JSON, else
  ``images/`` beside the JSON's folder (the ``annotations/`` + ``images/`` layout).
  A width/height that disagrees with the file skips the image: its boxes would be misplaced.
- ``annotations``: ``{image_id, category_id, bbox: [x, y, w, h] in pixels, iscrowd?}``. Crowd
  regions (``iscrowd=1``) are not objects to detect one by one: they are skipped and counted.
  An image without annotations is a background image.

Boxes are then checked by the same rules as YOLO labels (``label_check.check_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...data import image_check
from ...data.coco_json import categories, load_coco_json
from ...data.data_config import DataConfig
from ...data.errors import DataConfigError, EmptySplitError
from ...data.label_cache import SplitScan, cached_scan, fingerprint
from ...data.label_check import LabelCheck, check_rows


@dataclass
class _CocoImage:
    """One ``images`` entry and its annotations, gathered before any file is opened."""

    path: Path
    json_size: tuple[int, int] | None  # (height, width) as the JSON states it
    rows: list[list[float]]  # (class, x, y, w, h) in pixels
    where: list[str]  # per row, "annotation <id>"
    error: str | None = None


def read_coco_split(json_path: Path, config: DataConfig, split: str, *,
                    use_cache: bool = True) -> SplitScan:
    """Scan a COCO JSON split: verify each image, convert and check its boxes, cache the result.

    The JSON is parsed on every call (it is the only list of the split's images); the cache
    spares the image checks, which are the slow part.

    Raises:
        DataConfigError: the JSON is unreadable or malformed, or its category count differs
            from the data.yaml's class count.
        EmptySplitError: no images folder exists where the file names point.
    """
    doc = load_coco_json(json_path)
    cats = categories(doc, json_path)
    if len(cats) != config.nc:
        raise DataConfigError(f"{json_path} has {len(cats)} categories but {config.source} defines "
                              f"{config.nc} classes; make 'names' in {config.source} list one name "
                              "per category (or drop 'names' to take them from the JSON)")
    class_of = {cid: i for i, (cid, _) in enumerate(cats)}
    folder = _images_folder(json_path, config, split)
    images, crowd = _gather(doc, json_path, folder, class_of)
    key = fingerprint([json_path, *(im.path for im in images)],
                      {"reader": "coco", "nc": config.nc, "images": str(folder)})

    def scan() -> SplitScan:
        result = _scan(images, json_path, config)
        result.counts["crowd"] = crowd
        return result

    return cached_scan(split, json_path.parent, key, scan, use_cache=use_cache,
                       cache_name=f"{json_path.stem}.{split}")


def _images_folder(json_path: Path, config: DataConfig, split: str) -> Path:
    if split in config.coco_images:
        candidates = [config.coco_images[split]]
    else:
        candidates = [json_path.parent / "images", json_path.parent.parent / "images"]
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise EmptySplitError(
        f"{split}: the images of {json_path} were looked for in "
        f"{' and '.join(str(c) for c in candidates)}, which do not exist; set `coco_images` in "
        f"{config.source} to the folder the file names are relative to, e.g. "
        "`coco_images: {train: train2017, val: val2017}`")


def _gather(doc: Mapping[str, object], json_path: Path, folder: Path,
            class_of: Mapping[int, int]) -> tuple[list[_CocoImage], int]:
    """Images in JSON order with their annotations (pixels); also the number of crowd boxes."""
    images: list[_CocoImage] = []
    by_id: dict[object, _CocoImage] = {}
    entries: list[Any] = doc["images"]  # type: ignore[assignment]  # a list: checked by load_coco_json
    for i, entry in enumerate(entries):
        name = entry.get("file_name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name or "id" not in entry:
            raise DataConfigError(f"{json_path}: images[{i}] = {entry!r} needs an \"id\" and a "
                                  '"file_name", e.g. {"id": 1, "file_name": "a.jpg"}')
        width, height = entry.get("width"), entry.get("height")
        size = (height, width) if isinstance(width, int) and isinstance(height, int) else None
        image = _CocoImage(folder / name, size, [], [])
        images.append(image)
        by_id[entry["id"]] = image
    crowd = 0
    annotations: list[Any] = doc["annotations"]  # type: ignore[assignment]  # checked by load_coco_json
    for ann in annotations:
        found = by_id.get(ann.get("image_id")) if isinstance(ann, Mapping) else None
        if found is None:
            continue
        image = found
        if image is None or image.error is not None:
            continue  # annotations of images the JSON does not list cannot be placed
        if ann.get("iscrowd"):
            crowd += 1
            continue
        where = f"annotation {ann.get('id', '?')}"
        bbox, cat = ann.get("bbox"), ann.get("category_id")
        if (not isinstance(bbox, list) or len(bbox) != 4
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox)):
            image.error = f"{where}: bbox {bbox!r} is not [x, y, width, height] in pixels"
        elif cat not in class_of:
            image.error = (f"{where}: category_id {cat!r} is not among the categories "
                           f"(ids {', '.join(str(c) for c in class_of)})")
        else:
            image.rows.append([class_of[cat], *map(float, bbox)])
            image.where.append(where)
    return images, crowd


def _scan(images: list[_CocoImage], json_path: Path, config: DataConfig) -> SplitScan:
    def check(image: _CocoImage) -> tuple[image_check.ImageCheck, LabelCheck | None]:
        verdict = image_check.check_image(image.path)
        if verdict.error is not None or verdict.size is None:
            return verdict, None
        return verdict, _labels(image, verdict.size, json_path, config)

    scan = SplitScan()
    with ThreadPoolExecutor() as pool:
        for image, (verdict, labels) in zip(images, pool.map(check, images)):
            scan.add(image.path, verdict, image.path, labels)
    return scan


def _labels(image: _CocoImage, size: tuple[int, int], json_path: Path, config: DataConfig) -> LabelCheck:
    """Pixel boxes -> checked normalized rows; problems name the JSON (the image is the path)."""
    prefix = f"annotations in {json_path.name}: "
    if image.error is not None:
        return LabelCheck(np.zeros((0, 5), np.float32), error=prefix + image.error)
    if image.json_size is not None and image.json_size != size:
        return LabelCheck(np.zeros((0, 5), np.float32), error=(
            f"{json_path.name} gives its size as {image.json_size[1]}x{image.json_size[0]} but the "
            f"file is {size[1]}x{size[0]}; fix the JSON's width/height or the image"))
    if not image.rows:
        return LabelCheck(np.zeros((0, 5), np.float32))
    px = np.asarray(image.rows, dtype=np.float64)
    height, width = size
    rows = np.stack([px[:, 0], (px[:, 1] + px[:, 3] / 2) / width, (px[:, 2] + px[:, 4] / 2) / height,
                     px[:, 3] / width, px[:, 4] / height], axis=1)
    checked = check_rows(rows, config.nc, config.source, image.where)
    if checked.error is not None:
        return LabelCheck(checked.rows, error=prefix + checked.error)
    return LabelCheck(checked.rows, notes=tuple(prefix + n for n in checked.notes))
