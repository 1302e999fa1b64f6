"""The predict benchmarks' inputs, written once: JPEGs and a video, from photographs or synthetic.

``photos`` (the default of ``bench_predict.py``): the five photographs in ``tools/photos/``
cropped at a random place and scale, scaled to 1280x720, 1920x1080 or 1080x1920, with a fine grain
(sigma ``GRAIN`` grey levels per channel) so a 1080p frame's quality-90 JPEG is about 400 KB, the
size of a camera photograph's; the video pans over one of them at 1080p. ``synthetic``: smooth
gradients with solid shapes (cheaper to decode than photographs), the earlier benchmark set.
Neither needs a download; ``bench_predict.py`` and the ``probe_*`` scripts share them.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


PHOTOS = Path(__file__).parent / "photos"
GRAIN = 4.0
PHOTO_SIZES = ((720, 1280), (1080, 1920), (720, 1280), (1080, 1920), (1920, 1080))
"""Frame sizes ``(h, w)`` of a folder, in turn: 720p and 1080p landscape, one portrait in five."""


@functools.cache
def photographs() -> tuple[np.ndarray, ...]:
    """The bundled photographs, RGB, in name order."""
    return tuple(np.asarray(Image.open(path).convert("RGB")) for path in sorted(PHOTOS.glob("*.jpg")))


def photo(seed: int, h: int = 720, w: int = 1280, *, centre: tuple[float, float] | None = None) -> np.ndarray:
    """Photograph ``seed`` (modulo five): a crop of ``h:w`` aspect (70-100% of the largest, at a
    random place, or centred on ``centre`` as fractions of the source) scaled to ``w x h``, grained."""
    rng = np.random.default_rng(seed)
    src = photographs()[seed % len(photographs())]
    sh, sw = src.shape[:2]
    cw = min(sw, sh * w / h) * rng.uniform(0.7, 1.0)
    ch = cw * h / w
    if centre is None:
        x, y = rng.uniform(0, sw - cw), rng.uniform(0, sh - ch)
    else:
        x = min(max(centre[0] * sw - cw / 2, 0.0), sw - cw)
        y = min(max(centre[1] * sh - ch / 2, 0.0), sh - ch)
    scaled = Image.fromarray(src).resize((w, h), Image.Resampling.BICUBIC, box=(x, y, x + cw, y + ch))
    grain = rng.normal(0.0, GRAIN, (h, w, 3)).astype(np.float32)
    return np.clip(np.asarray(scaled, np.float32) + grain, 0, 255).astype(np.uint8)


def one_image(kind: str, h: int = 720, w: int = 1280) -> np.ndarray:
    """The batch-1 scenario's picture."""
    return photo(999, h, w) if kind == "photos" else scene(999, h, w)


def write_images(folder: Path, n: int, kind: str = "synthetic") -> list[Path]:
    """``n`` quality-90 JPEGs in ``folder`` (kept when already there)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"img{i:05d}.jpg" for i in range(n)]
    todo = [(i, p) for i, p in enumerate(paths) if not p.exists()]

    def make(i: int) -> np.ndarray:
        return photo(i, *PHOTO_SIZES[i % len(PHOTO_SIZES)]) if kind == "photos" else scene(i)

    if todo:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda ip: Image.fromarray(make(ip[0])).save(ip[1], quality=90), todo))
    return paths


def write_video(path: Path, seconds: int, fps: int = 30, kind: str = "synthetic") -> str | None:
    """A video (photos: a 1080p pan over a photograph; synthetic: 720p moving shapes); returns
    None, or why it could not be written."""
    if path.exists():
        return None
    n = seconds * fps
    h, w = (1080, 1920) if kind == "photos" else (720, 1280)

    def make(i: int) -> np.ndarray:
        return photo(7, h, w, centre=(0.3 + 0.4 * i / max(1, n - 1), 0.5)) if kind == "photos" else _moving(i)

    frames = in_order(make, n)
    try:
        import av
    except ImportError:
        pass
    else:
        with av.open(str(path), mode="w") as out:
            stream = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=fps)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
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
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps, (w, h))
    for img in frames:
        writer.write(img[:, :, ::-1])
    writer.release()
    return None


def in_order(make: Callable[[int], np.ndarray], n: int, workers: int = 8) -> Iterator[np.ndarray]:
    """``make(0)`` .. ``make(n - 1)`` computed on ``workers`` threads (PIL's resize and numpy's
    random draws release the GIL), yielded in order, at most ``2 * workers`` ahead: a 30-s 1080p
    video's frames took 99 s one by one on two cores, most of it the frames, not the encoder."""
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[np.ndarray]] = deque()
        for i in range(n):
            pending.append(pool.submit(make, i))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


_BASE = scene(12345)


def _moving(i: int) -> np.ndarray:
    img = _BASE.copy()
    x = (i * 7) % 1000
    img[200:400, x:x + 200] = (250, 40, 40)
    return img
