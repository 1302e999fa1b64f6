"""Synthetic tracking scenes with known identities, and the identity-switch count.

Each scene yields per frame the detections a detector would give (rows x1, y1, x2, y2, score),
the ground-truth object of each row, and optionally the rendered picture (for camera-motion
compensation). ``identity_switches`` runs a tracker over a scene and counts, per object, how
often the id it is reported with changes (CLEAR-MOT's IDSW, without the distance gating: here
every detection's object is known)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Frame:
    dets: np.ndarray            # [N, 5] x1, y1, x2, y2, score
    objects: list[int]          # ground-truth object of each row
    image: np.ndarray | None = None


def crossing(seed: int, n_frames: int = 60, n_objects: int = 4, occlude: bool = True) -> Iterator[Frame]:
    """People-sized boxes on straight paths that cross the frame and each other; an object behind
    another (a lower index is nearer) that it overlaps is not detected, as a detector would miss it."""
    rng = np.random.default_rng(seed)
    w, h = 30.0, 60.0
    start = np.stack([rng.uniform(20, 60, n_objects) + (rng.random(n_objects) < 0.5) * 220,
                      rng.uniform(60, 140, n_objects)], axis=1)
    velocity = np.stack([np.where(start[:, 0] < 160, 1, -1) * rng.uniform(2.5, 5.0, n_objects),
                         rng.uniform(-1.0, 1.0, n_objects)], axis=1)
    for f in range(n_frames):
        centres = start + velocity * f
        boxes = np.concatenate([centres - (w / 2, h / 2), centres + (w / 2, h / 2)], axis=1)
        rows, objects = [], []
        for k in range(n_objects):
            hidden = occlude and any(_iou(boxes[k], boxes[j]) > 0.3 for j in range(k))
            if hidden or rng.random() < 0.03:
                continue
            rows.append([*(boxes[k] + rng.normal(0, 1.5, 4)), rng.uniform(0.7, 0.95)])
            objects.append(k)
        yield Frame(np.array(rows).reshape(-1, 5), objects)


def shaking_camera(seed: int, n_frames: int = 40, size: tuple[int, int] = (160, 240)) -> Iterator[Frame]:
    """Small objects standing or walking slowly on a textured background seen by a shaking camera:
    each frame the picture jumps by up to ``JUMP`` pixels, more than an object's width."""
    rng = np.random.default_rng(seed)
    jump = 14
    hh, ww = size
    world = _texture(rng, hh + 8 * jump, ww + 8 * jump)
    objects = np.array([[60.0, 60.0], [120.0, 70.0], [180.0, 100.0], [90.0, 120.0]]) + 4 * jump
    velocity = rng.uniform(-0.5, 0.5, objects.shape)
    side = 12
    offset = np.zeros(2)
    for f in range(n_frames):
        offset = np.clip(offset + rng.uniform(-jump, jump, 2), -3 * jump, 3 * jump)
        ox, oy = (4 * jump + offset).astype(int)
        image = world[oy:oy + hh, ox:ox + ww].copy()
        rows, ids = [], []
        for k, (cx, cy) in enumerate(objects + velocity * f):
            x, y = cx - ox, cy - oy
            x1, y1 = int(round(x - side / 2)), int(round(y - side / 2))
            image[max(y1, 0):y1 + side, max(x1, 0):x1 + side] = (230, 40, 40)
            rows.append([x1, y1, x1 + side, y1 + side, 0.9])
            ids.append(k)
        yield Frame(np.array(rows, dtype=np.float64), ids, image)


def _texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth random grey texture (blocks of noise, upsampled), as RGB uint8."""
    coarse = rng.integers(40, 200, (h // 4 + 1, w // 4 + 1), dtype=np.int64)
    grey = np.kron(coarse, np.ones((4, 4), dtype=np.int64))[:h, :w]
    return np.repeat(grey[..., None], 3, axis=2).astype(np.uint8)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    lt, rb = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(rb - lt, 0, None)))
    union = float(np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2]) - inter)
    return inter / union if union > 0 else 0.0


def identity_switches(tracker: object, frames: Iterator[Frame]) -> tuple[int, int]:
    """``(switches, tracked)``: id changes summed over objects, and object-frames reported with an id."""
    last: dict[int, int] = {}
    switches = tracked = 0
    for frame in frames:
        extra = {"image": frame.image} if getattr(tracker, "wants_image", False) else {}
        out = tracker.update(frame.dets[:, :4], frame.dets[:, 4], np.zeros(len(frame.dets)), **extra)  # type: ignore[attr-defined]
        for row, track_id in zip(out.det_index.tolist(), out.ids.tolist()):
            obj = frame.objects[row]
            tracked += 1
            if obj in last and last[obj] != track_id:
                switches += 1
            last[obj] = track_id
    return switches, tracked
