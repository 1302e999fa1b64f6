"""BoT-SORT (motion part): ByteTrack's two-stage association with a width-and-height Kalman filter
and camera-motion compensation.

What it changes from ByteTrack, and why:

- The filter's state holds width and height (``kalman_xywh``) instead of aspect ratio and height,
  so a box that changes shape is predicted better and its IoU with the next detection stays high.
- Before association every predicted track (tentative ones too) is moved by the camera's own
  motion between the two frames (``camera_motion``): with a panning or shaking camera, ByteTrack's
  predictions land where the object was in the picture, not where it is.

BoT-SORT's appearance (ReID) branch is not here: it needs a second network and its weights;
association is by motion and IoU only. A user who has an embedding model can plug a tracker of
their own into ``model.track(tracker="module:Class")`` (see ``track.registry``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .bytetrack import ByteTrackConfig, ByteTracker, Track
from .camera_motion import METHODS, CameraMotion, CmcMethod, apply_warp
from .motion import XYWH


@dataclass(frozen=True)
class BoTSORTConfig(ByteTrackConfig):
    """ByteTrack's settings plus the camera-motion method.

    Attributes:
        cmc_method: ``"auto"`` (OpenCV's sparse optical flow when installed, else phase
            correlation), ``"sparse_flow"``, ``"phase"`` or ``"none"`` (see ``camera_motion``).
    """

    cmc_method: CmcMethod = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cmc_method not in METHODS:
            raise ConfigError(f"cmc_method={self.cmc_method!r} is not a camera-motion method; use one of "
                              f"{', '.join(METHODS)}")


class BoTSORT(ByteTracker):
    """BoT-SORT over a sequence of frames (one tracker per video or stream); give each frame's
    picture to ``update(..., image=frame)`` for the camera-motion compensation."""

    motion = XYWH
    wants_image = True

    def __init__(self, config: BoTSORTConfig | None = None) -> None:
        self.config: BoTSORTConfig = config or BoTSORTConfig()
        self.camera = CameraMotion(self.config.cmc_method)
        self.last_warp = np.eye(2, 3)
        super().__init__(self.config)

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "camera"):
            self.camera.reset()

    def _compensate(self, tracks: list[Track], image: np.ndarray | None, boxes: np.ndarray) -> None:
        self.last_warp = warp = self.camera.estimate(image, boxes)
        if not tracks or np.allclose(warp, np.eye(2, 3)):
            return
        means, covs = apply_warp(warp, np.stack([t.mean for t in tracks]), np.stack([t.cov for t in tracks]),
                                 sizes=True)
        for track, mean, cov in zip(tracks, means, covs):
            track.mean, track.cov = mean, cov
