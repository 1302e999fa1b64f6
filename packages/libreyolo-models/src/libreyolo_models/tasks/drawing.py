"""Drawing predictions on an image (PIL only; no OpenCV dependency), and whether a window can show one."""

from __future__ import annotations

import colorsys
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor


def class_color(cls: int) -> tuple[int, int, int]:
    """A stable, well-separated colour per class id (golden-angle hue steps)."""
    hue = (cls * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.75, 0.95)
    return int(r * 255), int(g * 255), int(b * 255)


def draw_detections(image: np.ndarray, det: Tensor, names: dict[int, str], *, labels: bool = True,
                    conf: bool = True, line_width: int | None = None, ids: list[int] | None = None,
                    trails: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
    """Boxes ``det [N, 6]`` (x1, y1, x2, y2, score, class) drawn on a copy of ``image`` (RGB uint8).

    With track ``ids`` (one per box) each box is coloured by its id, so one object keeps its
    colour through a video, and labelled ``"id:7 name score"``; ``trails`` maps an id to its
    recent centres ``[K, 2]``, drawn as a line under the boxes.
    """
    canvas = Image.fromarray(image.copy())
    draw = ImageDraw.Draw(canvas)
    width = line_width or max(1, round(sum(canvas.size) / 2 * 0.003))
    font = ImageFont.load_default()
    for track_id, points in (trails or {}).items():
        if len(points) > 1:
            draw.line([tuple(p) for p in np.asarray(points, dtype=float).tolist()], fill=class_color(track_id),
                      width=width)
    for i, (x1, y1, x2, y2, score, cls) in enumerate(det.tolist()):
        color = class_color(int(cls) if ids is None else ids[i])
        x1, x2, y1, y2 = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)  # an untrained model's may be inverted
        draw.rectangle((x1, y1, x2, y2), outline=color, width=width)
        if labels:
            text = ("" if ids is None else f"id:{ids[i]} ") + names.get(int(cls), str(int(cls))) + (
                f" {score:.2f}" if conf else "")
            left, top, right, bottom = draw.textbbox((x1, y1), text, font=font)
            th = bottom - top
            ty = y1 - th - 2 if y1 - th - 2 >= 0 else y1
            draw.rectangle((x1, ty, x1 + (right - left) + 4, ty + th + 2), fill=color)
            draw.text((x1 + 2, ty), text, fill=(255, 255, 255), font=font)
    return np.asarray(canvas)


def draw_top_classes(image: np.ndarray, lines: list[str]) -> np.ndarray:
    """``lines`` (best class first) written top-left on a copy of ``image`` (RGB uint8), each on
    a dark band so it reads on any background."""
    canvas = Image.fromarray(image.copy())
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    y = 2.0
    for rank, text in enumerate(lines):
        left, top, right, bottom = draw.textbbox((4, y), text, font=font)
        draw.rectangle((2, y, right + 2, bottom + 2), fill=(30, 30, 30))
        draw.text((4, y), text, fill=class_color(0) if rank == 0 else (255, 255, 255), font=font)
        y = bottom + 4
    return np.asarray(canvas)


def has_display() -> bool:
    """Whether a window can open: always on Windows and macOS, on Linux only with X11 or Wayland."""
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def save_grid(tiles: Sequence[np.ndarray], path: Path) -> Path:
    """Tiles of one size on a square-ish grid (grey where the grid has no tile), as a JPEG: the
    pictures of a batch (``train_batch*``, ``val_batch*``)."""
    h, w = tiles[0].shape[:2]
    cols = math.ceil(math.sqrt(len(tiles)))
    canvas = np.full((math.ceil(len(tiles) / cols) * h, cols * w, 3), 114, np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = tile
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(canvas).save(path, quality=90)
    return path
