"""COCO JSON splits of an instance task: images and annotations gathered, images checked, each
annotation turned into a box row and its extra by the task's converter.

The file's layout and the images folder follow detection's reader (``tasks.detect.coco_reader``):
``categories`` map to class ids in sorted id order; ``file_name`` is relative to data.yaml's
``coco_images`` or to ``images/`` beside the JSON or its folder. Crowd annotations
(``iscrowd=1``) are skipped and counted; an annotation the converter rejects skips its image, with
the annotation named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ...data import image_check
from ...data.coco_json import categories, load_coco_json
from ...data.data_config import DataConfig
from ...data.errors import DataConfigError, EmptySplitError
from .split import InstanceSplit, LabelError, add_image

Converter = Callable[[Mapping[str, Any], int, tuple[int, int]], tuple[np.ndarray, Any]]
"""``(annotation, class id, (height, width) of the image)`` -> (``[5]`` box row normalised, extra);
raises ``LabelError`` naming what is wrong."""


def read_coco_instances(json_path: Path, config: DataConfig, split: str, convert: Converter) -> InstanceSplit:
    """Read one COCO JSON split (see the module docstring).

    Raises:
        DataConfigError: an unreadable or malformed JSON, or a category count unlike data.yaml's.
        EmptySplitError: no images folder exists where the file names point.
    """
    doc = load_coco_json(json_path)
    cats = categories(doc, json_path)
    if len(cats) != config.nc:
        raise DataConfigError(f"{json_path} has {len(cats)} categories but {config.source} defines {config.nc} "
                              "classes; make 'names' list one name per category (or drop 'names')")
    class_of = {cid: i for i, (cid, _) in enumerate(cats)}
    folder = images_folder(json_path, config, split)
    entries: list[Any] = doc["images"]  # type: ignore[assignment]  # a list: checked by load_coco_json
    by_id: dict[object, tuple[Path, list[Mapping[str, Any]]]] = {}
    order: list[object] = []
    for i, entry in enumerate(entries):
        name = entry.get("file_name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name or "id" not in entry:
            raise DataConfigError(f"{json_path}: images[{i}] = {entry!r} needs an \"id\" and a \"file_name\"")
        by_id[entry["id"]] = (folder / name, [])
        order.append(entry["id"])
    crowd = 0
    annotations: list[Any] = doc["annotations"]  # type: ignore[assignment]
    for ann in annotations:
        found = by_id.get(ann.get("image_id")) if isinstance(ann, Mapping) else None
        if found is None:
            continue
        if ann.get("iscrowd"):
            crowd += 1
            continue
        found[1].append(ann)

    def check(image_id: object) -> tuple[image_check.ImageCheck, tuple[np.ndarray, list[Any]] | str]:
        path, anns = by_id[image_id]
        verdict = image_check.check_image(path)
        if verdict.size is None:
            return verdict, ""
        rows, extras = [], []
        for ann in anns:
            cat = ann.get("category_id")
            if cat not in class_of:
                return verdict, (f"annotation {ann.get('id', '?')} in {json_path.name}: category_id {cat!r} is not "
                                 "among the categories")
            try:
                row, extra = convert(ann, class_of[cat], verdict.size)
            except LabelError as err:
                return verdict, f"annotation {ann.get('id', '?')} in {json_path.name}: {err}"
            rows.append(row)
            extras.append(extra)
        return verdict, (np.asarray(rows, np.float32).reshape(-1, 5), extras)

    out = InstanceSplit(split, [], [], [], [], dict(config.names), [], str(json_path), {"crowd": crowd})
    with ThreadPoolExecutor() as pool:
        for image_id, (verdict, labels) in zip(order, pool.map(check, order)):
            add_image(out, by_id[image_id][0], verdict, labels)
    return out


def images_folder(json_path: Path, config: DataConfig, split: str) -> Path:
    """The folder COCO ``file_name`` entries are relative to (see the module docstring)."""
    candidates = ([config.coco_images[split]] if split in config.coco_images
                  else [json_path.parent / "images", json_path.parent.parent / "images"])
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise EmptySplitError(f"{split}: the images of {json_path} were looked for in "
                          f"{' and '.join(str(c) for c in candidates)}, which do not exist; set `coco_images` in "
                          f"{config.source} to the folder the file names are relative to")


def box_row(cls: int, box_xyxy: np.ndarray) -> np.ndarray:
    """``[5]`` (class, cx, cy, w, h) from a normalised x1, y1, x2, y2 box, clipped to the image."""
    x1, y1, x2, y2 = np.clip(np.asarray(box_xyxy, dtype=np.float64), 0.0, 1.0)
    return np.array([cls, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dtype=np.float32)
