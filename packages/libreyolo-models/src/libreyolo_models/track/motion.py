"""The two Kalman box filters behind one small interface, so a tracker names its motion model
instead of calling one filter's functions: ``XYAH`` (SORT and ByteTrack: aspect ratio and
height) and ``XYWH`` (BoT-SORT: width and height). Boxes go in and out as corners
(x1, y1, x2, y2); the state layout stays the filter's business."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kalman, kalman_xywh


@dataclass(frozen=True)
class Motion:
    """A box filter: ``initiate``/``update`` take corner boxes, ``predict`` a stack of states,
    ``box`` reads a state's corners."""

    name: str

    def initiate(self, xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.name == "xyah":
            return kalman.initiate(kalman.xyxy_to_xyah(xyxy))
        return kalman_xywh.initiate(kalman_xywh.xyxy_to_xywh(xyxy))

    def predict(self, means: np.ndarray, covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (kalman if self.name == "xyah" else kalman_xywh).predict(means, covs)

    def update(self, mean: np.ndarray, cov: np.ndarray, xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.name == "xyah":
            return kalman.update(mean, cov, kalman.xyxy_to_xyah(xyxy))
        return kalman_xywh.update(mean, cov, kalman_xywh.xyxy_to_xywh(xyxy))

    def box(self, mean: np.ndarray) -> np.ndarray:
        if self.name == "xyah":
            return kalman.xyah_to_xyxy(mean[..., :4])
        return kalman_xywh.xywh_to_xyxy(mean[..., :4])

    @property
    def size_velocity(self) -> list[int]:
        """State indices of the size velocities a lost track stops (height; width too for xywh)."""
        return [7] if self.name == "xyah" else [6, 7]


XYAH = Motion("xyah")
XYWH = Motion("xywh")
