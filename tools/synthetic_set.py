"""Synthetic detection images for the benchmarks: gradient backgrounds with coloured boxes.

``write_images`` makes the JPEGs and their label rows; ``write_yolo_dataset`` lays them out as a
YOLO dataset with a ``data.yaml`` (what ``model.train(data=...)`` reads).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

NC = 5


def write_image(folder: Path, i: int, imgsz: int) -> tuple[Path, np.ndarray, tuple[int, int]]:
    """One landscape or portrait JPEG (long side ``imgsz``) with 2-8 boxes; returns (path, rows, (h, w))."""
    rng = np.random.default_rng(i)
    h, w = (imgsz, imgsz * 3 // 4) if i % 3 == 0 else (imgsz * 3 // 4, imgsz)
    yy, xx = np.mgrid[0:h, 0:w]
    pixels = np.stack((xx * 255 // w, yy * 255 // h, (xx ^ yy) & 255), -1).astype(np.uint8)
    rows = []
    for k in range(int(rng.integers(2, 9))):
        bw, bh = int(rng.integers(w // 20, w // 3)), int(rng.integers(h // 20, h // 3))
        x1, y1 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        pixels[y1 : y1 + bh, x1 : x1 + bw] = rng.integers(0, 256, 3)
        rows.append([k % NC, (x1 + bw / 2) / w, (y1 + bh / 2) / h, bw / w, bh / h])
    path = folder / f"synthetic_{i:05d}.jpg"
    Image.fromarray(pixels).save(path, quality=90)
    return path, np.array(rows, np.float32), (h, w)


def write_images(folder: Path, count: int, imgsz: int, start: int = 0) -> list[tuple[Path, np.ndarray, tuple[int, int]]]:
    folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda i: write_image(folder, i, imgsz), range(start, start + count)))


def write_yolo_dataset(root: Path, *, n_train: int, n_val: int, imgsz: int) -> Path:
    """A YOLO-format dataset under ``root``; returns its ``data.yaml``."""
    for split, count, start in (("train", n_train, 0), ("val", n_val, n_train)):
        made = write_images(root / "images" / split, count, imgsz, start)
        labels = root / "labels" / split
        labels.mkdir(parents=True, exist_ok=True)
        for path, rows, _ in made:
            (labels / (path.stem + ".txt")).write_text(
                "".join(f"{int(r[0])} {r[1]:.6f} {r[2]:.6f} {r[3]:.6f} {r[4]:.6f}\n" for r in rows))
    names = "".join(f"  {k}: class{k}\n" for k in range(NC))
    yaml_path = root / "data.yaml"
    yaml_path.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n{names}")
    return yaml_path
