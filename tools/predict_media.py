"""The predict benchmarks' inputs: 1280x720 JPEGs and a 720p moving-shapes video, written once.

Synthetic scenes (smooth gradients with solid shapes) compress like photographs, not like noise,
and need no download; ``bench_predict.py`` and the ``probe_*`` scripts share them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image


def scene(seed: int, h: int = 720, w: int = 1280) -> np.ndarray:
    """A smooth background with a few solid shapes: JPEG-compressible like a photo, not noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 255 // w), (yy * 255 // h), np.full_like(xx, int(rng.integers(0, 255)))], -1)
    for _ in range(6):
        x, y = int(rng.integers(0, w - 200)), int(rng.integers(0, h - 200))
        img[y:y + int(rng.integers(40, 200)), x:x + int(rng.integers(40, 200))] = rng.integers(0, 255, 3)
    return img.astype(np.uint8)


def write_images(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"img{i:05d}.jpg" for i in range(n)]
    todo = [(i, p) for i, p in enumerate(paths) if not p.exists()]
    if todo:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda ip: Image.fromarray(scene(ip[0])).save(ip[1], quality=90), todo))
    return paths


def write_video(path: Path, seconds: int, fps: int = 30) -> str | None:
    """A 720p moving-shapes video; returns None, or why it could not be written."""
    if path.exists():
        return None
    frames = (_moving(i) for i in range(seconds * fps))
    try:
        import av
    except ImportError:
        pass
    else:
        with av.open(str(path), mode="w") as out:
            stream = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=fps)
            stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
            for img in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return None
    try:
        import cv2
    except ImportError:
        return "neither PyAV (av) nor OpenCV (cv2) is installed"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps, (1280, 720))
    for img in frames:
        writer.write(img[:, :, ::-1])
    writer.release()
    return None


_BASE = scene(12345)


def _moving(i: int) -> np.ndarray:
    img = _BASE.copy()
    x = (i * 7) % 1000
    img[200:400, x:x + 200] = (250, 40, 40)
    return img
