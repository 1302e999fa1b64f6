"""One object's mask as a dataset stores it, rasterised at whatever size the pipeline asks.

- ``PolygonMask``: one or more polygons, normalised to the image (YOLO segment labels, COCO's
  ``segmentation`` lists); the mask is their union, a pixel inside when its centre is (even-odd
  rule). COCO polygons cannot hold holes; RLE can.
- ``RLEMask``: COCO's run-length encoding over the original pixels (column-major, runs starting
  with background), uncompressed (``counts`` a list) or compressed (``counts`` a string, COCO's
  6-bit variable-length form); exact, holes and several parts included. Rasterised at another size
  by nearest neighbour on pixel centres.

Both pickle cheaply (DataLoader workers rasterise them per sample) and say their box.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PolygonMask:
    """Polygons ``float [k, 2]`` (x, y normalised to the image, k >= 3), their union the mask."""

    polygons: tuple[np.ndarray, ...]

    def rasterize(self, height: int, width: int) -> np.ndarray:
        out = np.zeros((height, width), dtype=bool)
        for poly in self.polygons:
            out |= fill_polygon(poly * np.array([width, height]), height, width)
        return out

    def box(self) -> np.ndarray:
        """``[4]`` x1, y1, x2, y2 normalised: the polygons' extent."""
        pts = np.concatenate(self.polygons)
        return np.concatenate((pts.min(0), pts.max(0)))


@dataclass(frozen=True)
class RLEMask:
    """COCO RLE over an ``(height, width)`` image: ``counts`` alternating background / object runs,
    column-major."""

    height: int
    width: int
    counts: tuple[int, ...]

    def decode(self) -> np.ndarray:
        """``bool [height, width]`` at the encoded size."""
        values = np.zeros(len(self.counts), dtype=bool)
        values[1::2] = True
        flat = np.repeat(values, np.asarray(self.counts, dtype=np.int64))
        if flat.size != self.height * self.width:
            raise ValueError(f"RLE runs cover {flat.size} pixels, not {self.height}x{self.width}")
        return flat.reshape(self.width, self.height).T

    def rasterize(self, height: int, width: int) -> np.ndarray:
        full = self.decode()
        if (height, width) == (self.height, self.width):
            return full
        rows = np.minimum(((np.arange(height) + 0.5) * self.height / height).astype(np.int64), self.height - 1)
        cols = np.minimum(((np.arange(width) + 0.5) * self.width / width).astype(np.int64), self.width - 1)
        return full[np.ix_(rows, cols)]

    def box(self) -> np.ndarray:
        """``[4]`` x1, y1, x2, y2 normalised (pixel edges); zeros for an empty mask."""
        full = self.decode()
        ys, xs = np.nonzero(full)
        if not len(xs):
            return np.zeros(4)
        return np.array([xs.min() / self.width, ys.min() / self.height, (xs.max() + 1) / self.width,
                         (ys.max() + 1) / self.height])

    @classmethod
    def encode(cls, mask: np.ndarray) -> RLEMask:
        """The RLE of a ``bool [h, w]`` mask."""
        flat = np.asarray(mask, dtype=bool).T.reshape(-1)
        changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
        edges = np.concatenate(([0], changes, [flat.size]))
        runs = np.diff(edges).tolist()
        if flat.size and flat[0]:
            runs = [0, *runs]
        return cls(int(mask.shape[0]), int(mask.shape[1]), tuple(int(r) for r in runs))

    def to_coco(self) -> dict[str, object]:
        """COCO's compressed form: ``{"size": [h, w], "counts": "<string>"}``."""
        return {"size": [self.height, self.width], "counts": compress_counts(self.counts)}


def fill_polygon(points: np.ndarray, height: int, width: int) -> np.ndarray:
    """``bool [height, width]``: pixels whose centre lies inside the polygon ``points [k, 2]`` (pixel
    coordinates, continuous: pixel ``i`` spans ``[i, i + 1)``), by the even-odd rule; only the
    polygon's bounding rows and columns are computed."""
    out = np.zeros((height, width), dtype=bool)
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts) < 3:
        return out
    y_lo = max(int(np.floor(pts[:, 1].min() - 0.5)), 0)
    y_hi = min(int(np.ceil(pts[:, 1].max() - 0.5)) + 1, height)
    x_lo = max(int(np.floor(pts[:, 0].min() - 0.5)), 0)
    x_hi = min(int(np.ceil(pts[:, 0].max() - 0.5)) + 1, width)
    if y_hi <= y_lo or x_hi <= x_lo:
        return out
    yc = np.arange(y_lo, y_hi, dtype=np.float64)[:, None] + 0.5        # [R, 1] row centres
    xc = np.arange(x_lo, x_hi, dtype=np.float64) + 0.5                 # [C]
    x0, y0 = pts[:, 0][None], pts[:, 1][None]
    x1, y1 = np.roll(pts[:, 0], -1)[None], np.roll(pts[:, 1], -1)[None]
    crosses = (y0 <= yc) != (y1 <= yc)                                  # [R, E] edge spans the row centre
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = np.where(crosses, x0 + (yc - y0) * (x1 - x0) / (y1 - y0), np.inf)   # [R, E]
    inside = (xs[:, None, :] < xc[None, :, None]).sum(-1) % 2 == 1       # [R, C]
    out[y_lo:y_hi, x_lo:x_hi] = inside
    return out


def compress_counts(counts: Sequence[int]) -> str:
    """COCO's compressed RLE string of ``counts`` (each count after the second is stored as its
    difference to the count two before, in 5-bit groups with a continuation bit, offset by 48)."""
    out = []
    for i, value in enumerate(counts):
        x = int(value) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def decompress_counts(text: str) -> list[int]:
    """The counts of a compressed COCO RLE string (the inverse of :func:`compress_counts`).

    Raises:
        ValueError: a character outside COCO's alphabet or a truncated value.
    """
    counts: list[int] = []
    p = 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            if p >= len(text):
                raise ValueError("compressed RLE ends in the middle of a value")
            c = ord(text[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"compressed RLE has character {text[p]!r}, outside COCO's alphabet")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def mask_outline(mask: np.ndarray) -> np.ndarray:
    """The longest outer outline of a ``bool [h, w]`` mask as a polygon ``float32 [k, 2]`` (x, y in
    pixel-edge coordinates, following the pixel borders); ``[0, 2]`` for an empty mask."""
    m = np.pad(np.asarray(mask, dtype=bool), 1)
    # Directed boundary edges with the object on the left (image y grows downwards): each edge is a
    # step between pixel corners; loops are followed corner to corner.
    nxt: dict[tuple[int, int], list[tuple[int, int]]] = {}
    inside, up, down = m[1:-1, 1:-1], m[:-2, 1:-1], m[2:, 1:-1]
    left, right = m[1:-1, :-2], m[1:-1, 2:]
    for dy, dx, free, step in ((0, 0, ~up, (1, 0)), (1, 1, ~down, (-1, 0)),
                               (1, 0, ~left, (0, -1)), (0, 1, ~right, (0, 1))):
        ys, xs = np.nonzero(inside & free)
        for y, x in zip((ys + dy).tolist(), (xs + dx).tolist()):
            nxt.setdefault((x, y), []).append((x + step[0], y + step[1]))
    best: list[tuple[int, int]] = []
    while nxt:
        start = next(iter(nxt))
        loop, point = [start], start
        while True:
            targets = nxt.get(point)
            if not targets:
                break
            following = targets.pop()
            if not targets:
                del nxt[point]
            if following == start:
                break
            loop.append(following)
            point = following
        if len(loop) > len(best):
            best = loop
    if not best:
        return np.zeros((0, 2), dtype=np.float32)
    pts = np.asarray(best, dtype=np.float32)
    turn = np.any(np.roll(pts, 1, 0) - pts != pts - np.roll(pts, -1, 0), axis=1)  # keep corners only
    return pts[turn] if turn.any() else pts
