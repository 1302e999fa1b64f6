"""Instance segmentation data: YOLO polygon labels and COCO JSON (polygons and RLE).

- YOLO: ``data.yaml`` as for detection; each label row is ``class x1 y1 x2 y2 ... xk yk``, a
  polygon of ``k >= 3`` points normalised to the image (Ultralytics' segment format). A row of 5
  values (a box without an outline) or a point outside [0, 1] (beyond a small tolerance) makes the
  file unusable: its image is skipped with the line named. An empty label file, or none, is a
  background image.
- COCO: ``segmentation`` is a list of polygons (pixels, their union the object), or RLE
  (``{"size": [h, w], "counts": [...]}`` uncompressed or ``"counts": "<string>"`` compressed),
  which holds holes exactly. Crowd regions are skipped.

Each object's box is its mask's extent (polygons) or the tight box of its pixels (RLE).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...data.data_config import DataConfig
from ...data.label_check import COORD_TOLERANCE
from ..instances.coco import box_row, read_coco_instances
from ..instances.split import InstanceSplit, LabelError, ParsedLabels, report, scan_yolo_split
from .mask_shapes import PolygonMask, RLEMask, decompress_counts


def parse_polygon_labels(text: str) -> ParsedLabels:
    """One YOLO segment label file -> box rows and one ``PolygonMask`` per row."""
    rows, masks = [], []
    for line_no, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        n = len(fields)
        if n < 7 or n % 2 == 0:
            kind = "a box (class cx cy w h), not an outline" if n == 5 else f"{n} values"
            raise LabelError(f"line {line_no}: {kind}; segment labels are 'class x1 y1 x2 y2 x3 y3 ...' "
                             "(a polygon of at least 3 normalised points)")
        try:
            values = [float(f) for f in fields]
        except ValueError:
            raise LabelError(f"line {line_no}: {line.strip()!r} holds a value that is not a number") from None
        if not all(math.isfinite(v) for v in values) or values[0] != int(values[0]):
            raise LabelError(f"line {line_no}: the class id must be a whole number and every value finite")
        pts = np.asarray(values[1:], dtype=np.float64).reshape(-1, 2)
        if ((pts < -COORD_TOLERANCE) | (pts > 1 + COORD_TOLERANCE)).any():
            bad = pts[((pts < -COORD_TOLERANCE) | (pts > 1 + COORD_TOLERANCE)).any(1)][0]
            raise LabelError(f"line {line_no}: point ({bad[0]:g}, {bad[1]:g}) is outside [0, 1]; polygon points "
                             "are normalised by the image width and height")
        mask = PolygonMask((np.clip(pts, 0.0, 1.0),))
        rows.append(box_row(int(values[0]), mask.box()))
        masks.append(mask)
    return np.asarray(rows, np.float32).reshape(-1, 5), masks


def coco_segment(ann: Mapping[str, Any], cls: int, size: tuple[int, int]) -> tuple[np.ndarray, Any]:
    """A COCO annotation's mask (polygons or RLE) and box row (see the module docstring)."""
    seg = ann.get("segmentation")
    h, w = size
    if isinstance(seg, list) and seg:
        polys = []
        for poly in seg:
            pts = np.asarray(poly, dtype=np.float64).reshape(-1) if isinstance(poly, list) else np.zeros(0)
            if len(pts) < 6 or len(pts) % 2:
                raise LabelError(f"segmentation polygon {str(poly)[:60]} needs at least 3 (x, y) pixel pairs")
            polys.append(pts.reshape(-1, 2) / np.array([w, h]))
        mask: PolygonMask | RLEMask = PolygonMask(tuple(np.clip(p, 0.0, 1.0) for p in polys))
    elif isinstance(seg, Mapping) and "counts" in seg and "size" in seg:
        mask = rle_from_coco(seg, size)
    else:
        raise LabelError(f"segmentation {str(seg)[:60]!r} is neither polygons nor RLE "
                         "({\"size\": [h, w], \"counts\": ...})")
    box = mask.box()
    if box[2] <= box[0] or box[3] <= box[1]:
        raise LabelError("the mask is empty")
    return box_row(cls, box), mask


def rle_from_coco(seg: Mapping[str, Any], size: tuple[int, int]) -> RLEMask:
    """A COCO RLE dict (compressed or not) checked against the image's ``(height, width)``."""
    rle_size = seg.get("size")
    if not (isinstance(rle_size, list) and len(rle_size) == 2):
        raise LabelError(f"RLE size {rle_size!r} must be [height, width]")
    if (int(rle_size[0]), int(rle_size[1])) != tuple(size):
        raise LabelError(f"RLE size {rle_size} differs from the image's {list(size)} (height, width)")
    counts = seg["counts"]
    try:
        runs = decompress_counts(counts) if isinstance(counts, str) else [int(c) for c in counts]
    except (ValueError, TypeError) as err:
        raise LabelError(f"RLE counts cannot be read ({err})") from None
    if any(r < 0 for r in runs) or sum(runs) != size[0] * size[1]:
        raise LabelError(f"RLE runs sum to {sum(runs)}, not the image's {size[0] * size[1]} pixels")
    return RLEMask(int(size[0]), int(size[1]), tuple(runs))


def read_segment_split(config: DataConfig, split: str) -> InstanceSplit:
    """Read, check and report one split (YOLO entries and COCO JSON files, in data.yaml order)."""
    entries = config.split_paths(split)
    yolo = [e for e in entries if e.suffix.lower() != ".json"]
    parts = []
    if yolo:
        parts.append(scan_yolo_split(yolo, config.root, split, config.source, config.names, parse_polygon_labels))
    parts += [read_coco_instances(e, config, split, coco_segment) for e in entries if e.suffix.lower() == ".json"]
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return report(out, "masks")
