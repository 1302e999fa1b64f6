"""Tracking a run of ``Results``: one tracker per source, reset when the source changes; track
ids and trails written onto each ``Results``."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np
import torch

from ..tasks.detect.boxes import Boxes
from ..tasks.results import Results
from .registry import TrackerSpec

log = logging.getLogger(__name__)

TRAIL_LENGTH = 30   # centres kept per id for the drawn trail (one second at 30 fps)


def sequence_key(res: Results) -> str | None:
    """Which sequence a ``Results`` belongs to: its source for a video or stream frame; still
    images (``frame`` None) of one call form one sequence (a folder of frames is a video)."""
    if getattr(res, "frame", None) is None:
        return None
    return str(getattr(res, "source", res.path))


class TrackSession:
    """A tracker and the state that goes with it across frames and across ``stream=True``
    generators: the current source, the last frame index, and the trails per id.

    Args:
        spec: the tracker from the registry.
        config: its settings (an instance of ``spec.config``).
        conf: drop tracked boxes scoring under this from the output (None: keep all; the
            tracker still sees them, so a track survives a weak frame).
    """

    def __init__(self, spec: TrackerSpec, config: Any, conf: float | None = None) -> None:
        self.spec, self.config, self.conf = spec, config, conf
        self.tracker = spec.build(config)
        self.key: str | None = None
        self.last_frame: int | None = None
        self.trails: dict[int, deque[tuple[float, float]]] = {}
        self._last_seen: dict[int, int] = {}
        self._step = 0
        self._started = False
        self.sequence = 0   # counts resets: the same video twice in one call is two sequences

    def reset(self) -> None:
        self.sequence += 1
        self.tracker.reset()
        self.trails.clear()
        self._last_seen.clear()
        self._step = 0

    def __call__(self, res: Results) -> Results:
        """Track one frame: ``res.boxes`` keeps only tracked boxes, with ``id``; ``res.trails``
        holds their recent centres. Returns ``res`` (changed in place)."""
        key, frame = sequence_key(res), getattr(res, "frame", None)
        restarted = frame is not None and self.last_frame is not None and frame <= self.last_frame
        if self._started and (key != self.key or restarted):
            log.info("tracking %s: new source, tracker reset", key if key is not None else "images")
            self.reset()
        self._started, self.key, self.last_frame = True, key, frame
        if res.boxes is None:
            raise ValueError(f"{res.path}: these results hold no boxes; tracking needs a detect, segment or pose model")
        data = res.boxes.data.detach().cpu()
        extra = {"image": res.orig_img} if self.spec.wants_image else {}
        out = self.tracker.update(data[:, :4].double().numpy(), data[:, 4].double().numpy(),
                                  data[:, 5].numpy(), **extra)
        keep, ids = torch.from_numpy(out.det_index), torch.from_numpy(out.ids)
        if self.conf is not None and len(keep):
            strong = data[keep, 4] >= self.conf
            keep, ids = keep[strong], ids[strong]
        res.boxes = Boxes(data[keep], res.boxes.orig_shape, id=ids)
        _select_contents(res, keep)
        res.trails = self._record_trails(res.boxes)
        return res

    def _record_trails(self, boxes: Boxes) -> dict[int, np.ndarray]:
        self._step += 1
        centres = ((boxes.xyxy[:, :2] + boxes.xyxy[:, 2:]) / 2).tolist()
        ids = boxes.id.tolist() if boxes.id is not None else []
        for track_id, (cx, cy) in zip(ids, centres):
            self.trails.setdefault(track_id, deque(maxlen=TRAIL_LENGTH)).append((cx, cy))
            self._last_seen[track_id] = self._step
        for track_id in [i for i, seen in self._last_seen.items() if self._step - seen > TRAIL_LENGTH]:
            del self.trails[track_id], self._last_seen[track_id]
        return {i: np.array(self.trails[i], dtype=np.float32) for i in ids}


def _select_contents(res: Results, keep: torch.Tensor) -> None:
    """An instance task's per-object content (masks, keypoints) follows the tracked boxes: the
    same rows, in the same order, so ``keypoints[i]`` stays the object of ``boxes.id[i]``."""
    index = keep.numpy()
    if res.masks is not None and callable(getattr(res.masks, "select", None)):
        res.masks = res.masks.select(index)
    for name, content in list(res.contents.items()):
        select = getattr(content, "select", None)
        if callable(select):
            res.contents[name] = select(index)
