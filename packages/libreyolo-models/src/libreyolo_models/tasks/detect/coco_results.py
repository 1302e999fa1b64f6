"""Detections in the COCO results format (``save_json=True``): what ``pycocotools``'
``COCO.loadRes`` and evaluation servers read.

One dict per detection: ``image_id``, ``category_id``, ``bbox`` ``[x, y, w, h]`` in original
image pixels (top-left corner, size) and ``score``. ``image_id`` is the image file's stem as an
integer when it is a number (COCO's own ``000000000139.jpg`` -> 139), else the stem itself.
``category_id`` is the model's class id; ``category_ids`` maps it to a dataset's own ids where
they differ (COCO's 91-id scheme).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch import Tensor


def image_id(path: str | Path) -> int | str:
    """COCO image id of an image file: its stem, as an integer when it is one."""
    stem = Path(path).stem
    return int(stem) if stem.isdigit() else stem


def coco_detections(det: Tensor, path: str | Path, *, category_ids: Mapping[int, int] | None = None,
                    decimals: int = 3) -> list[dict[str, object]]:
    """``det [N, 6]`` (x1, y1, x2, y2 in original pixels, score, class) of the image at ``path``."""
    rows: list[dict[str, object]] = []
    img = image_id(path)
    for x1, y1, x2, y2, score, cls in det.tolist():
        c = int(cls)
        rows.append({"image_id": img, "category_id": category_ids.get(c, c) if category_ids else c,
                     "bbox": [round(x1, decimals), round(y1, decimals), round(x2 - x1, decimals),
                              round(y2 - y1, decimals)],
                     "score": round(score, 5)})
    return rows


def write_json(rows: Sequence[Mapping[str, object]], path: Path) -> Path:
    """Write ``rows`` as one JSON array, atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".predictions.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(list(rows), fh)
    os.replace(tmp, path)
    return path
