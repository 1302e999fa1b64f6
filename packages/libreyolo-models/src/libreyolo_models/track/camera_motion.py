"""Camera-motion compensation: the global 2x3 affine warp from the previous frame to this one,
estimated from the background, and applied to predicted tracks (BoT-SORT's CMC).

A moving or shaking camera moves every box in the picture at once; a constant-velocity filter
cannot know that, so its predictions miss and tracks break. Estimating the picture's own motion
and moving the predictions with it fixes that before association.

Methods (``cmc_method=``):

- ``"sparse_flow"``: corners tracked by pyramidal Lucas-Kanade optical flow, a similarity warp
  (rotation, scale, translation) fitted with RANSAC; needs OpenCV (``pip install
  'libreyolo-models[opencv]'``).
- ``"phase"``: phase correlation of the two frames (NumPy FFTs): translation only, no extra
  package. Enough for pans and shake; blind to rotation and zoom.
- ``"auto"``: ``"sparse_flow"`` when OpenCV is installed, else ``"phase"``.
- ``"none"``: a still camera (BoT-SORT then associates as ByteTrack does, with its own filter).

Both estimators ignore the detected boxes (objects move on their own), work on a grey copy at
most ``MAX_SIDE`` pixels wide, and return the identity when the background gives too little to go
on (a plain wall, a black frame), so a failed estimate never moves a track.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np

from ..errors import ConfigError

log = logging.getLogger(__name__)

CmcMethod = Literal["auto", "sparse_flow", "phase", "none"]
METHODS = ("auto", "sparse_flow", "phase", "none")
MAX_SIDE = 480            # frames are estimated at this width at most (a downscale of 1080p by 4)
MIN_TEXTURE_STD = 2.0     # grey levels: a background flatter than this gives no estimate
MIN_PHASE_PEAK = 0.05     # phase correlation peak height under which the shift is noise
MIN_FLOW_POINTS = 10      # tracked corners under which the flow fit is not trusted


def resolve_method(method: str) -> str:
    """``"auto"`` -> the best method installed; an unknown name -> ``ConfigError`` with the list."""
    if method not in METHODS:
        raise ConfigError(f"cmc_method={method!r} is not a camera-motion method; use one of {', '.join(METHODS)}")
    if method == "sparse_flow":
        _require_cv2()
    if method != "auto":
        return method
    try:
        import cv2  # noqa: F401
    except ImportError:
        log.info("camera-motion compensation: OpenCV is not installed, so BoT-SORT estimates translation only "
                 "(phase correlation); pip install 'libreyolo-models[opencv]' adds rotation and zoom")
        return "phase"
    return "sparse_flow"


def _require_cv2() -> None:
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise ConfigError("cmc_method='sparse_flow' needs OpenCV, which is not installed; pip install "
                          "'libreyolo-models[opencv]', or use cmc_method='phase' (translation only)") from None


class CameraMotion:
    """The warp between consecutive frames of one sequence (keeps the previous frame)."""

    def __init__(self, method: str = "auto") -> None:
        self.method = resolve_method(method)
        self.reset()

    def reset(self) -> None:
        self._previous: np.ndarray | None = None
        self._previous_mask: np.ndarray | None = None

    def estimate(self, image: np.ndarray | None, boxes: np.ndarray) -> np.ndarray:
        """The ``[2, 3]`` warp taking last frame's pixels to ``image``'s (identity on the first
        frame, without an image, or when the estimate is not trustworthy)."""
        identity = np.eye(2, 3)
        if self.method == "none" or image is None:
            return identity
        grey, scale = _grey(image)
        mask = _background_mask(grey.shape, np.asarray(boxes, dtype=np.float64).reshape(-1, 4) * scale)
        previous, previous_mask = self._previous, self._previous_mask
        self._previous, self._previous_mask = grey, mask
        if previous is None or previous_mask is None or previous.shape != grey.shape:
            return identity
        both = mask & previous_mask
        if not both.any() or grey[both].std() < MIN_TEXTURE_STD:
            return identity
        warp = (_phase_shift(previous, grey, both) if self.method == "phase"
                else _sparse_flow(previous, grey, previous_mask))
        if warp is None:
            return identity
        warp[:, 2] /= scale   # the translation back to full-resolution pixels
        return warp


def apply_warp(warp: np.ndarray, means: np.ndarray, covs: np.ndarray, *, sizes: bool) -> tuple[np.ndarray, np.ndarray]:
    """Move Kalman states ``[N, 8]`` / ``[N, 8, 8]`` by ``warp``: centres by the full affine map,
    velocities by its linear part; with ``sizes`` (the xywh filter) width and height and their
    velocities too. The covariances follow the same linear map."""
    linear = warp[:, :2]
    blocks = [linear if sizes or pair in (0, 2) else np.eye(2) for pair in range(4)]
    transform = np.zeros((8, 8))
    for pair, block in enumerate(blocks):
        transform[2 * pair:2 * pair + 2, 2 * pair:2 * pair + 2] = block
    # state order [cx, cy, a|w, h, vcx, vcy, va|vw, vh]: pairs (cx, cy), (a|w, h), (vcx, vcy), (va|vw, vh)
    new_means = means @ transform.T
    new_means[:, :2] += warp[:, 2]
    return new_means, transform @ covs @ transform.T


def _grey(image: np.ndarray) -> tuple[np.ndarray, float]:
    """Luma of an RGB uint8 frame, shrunk by block means to at most ``MAX_SIDE`` wide; the scale."""
    grey = np.asarray(image, dtype=np.float32)
    if grey.ndim == 3:
        grey = grey[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    step = max(1, int(np.ceil(grey.shape[1] / MAX_SIDE)))
    if step > 1:
        h, w = grey.shape[0] // step * step, grey.shape[1] // step * step
        grey = grey[:h, :w].reshape(h // step, step, w // step, step).mean(axis=(1, 3))
    return grey, 1.0 / step


def _background_mask(shape: tuple[int, ...], boxes: np.ndarray) -> np.ndarray:
    """True where no detection is (objects move by themselves, the background with the camera)."""
    mask = np.ones(shape[:2], dtype=bool)
    h, w = shape[:2]
    for x1, y1, x2, y2 in boxes:
        mask[max(0, int(y1)):min(h, int(np.ceil(y2))), max(0, int(x1)):min(w, int(np.ceil(x2)))] = False
    return mask


def _phase_shift(previous: np.ndarray, current: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """The translation from ``previous`` to ``current`` by phase correlation over the background
    (detections filled with its mean, a Hann window against the border's wrap-around)."""
    window = np.outer(np.hanning(current.shape[0]), np.hanning(current.shape[1])).astype(np.float32)

    def prepared(grey: np.ndarray) -> np.ndarray:
        fill = float(grey[mask].mean())
        return (np.where(mask, grey, fill) - fill) * window

    spectrum = np.fft.rfft2(prepared(current)) * np.conj(np.fft.rfft2(prepared(previous)))
    spectrum /= np.maximum(np.abs(spectrum), 1e-9)
    correlation = np.fft.irfft2(spectrum, s=current.shape)
    peak = np.unravel_index(int(np.argmax(correlation)), correlation.shape)
    if correlation[peak] < MIN_PHASE_PEAK:
        return None
    dy, dx = (float(p - s) if p > s // 2 else float(p) for p, s in zip(peak, correlation.shape))
    return np.array([[1.0, 0.0, dx], [0.0, 1.0, dy]])


def _sparse_flow(previous: np.ndarray, current: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """A similarity warp fitted (RANSAC) to background corners tracked by Lucas-Kanade flow."""
    import cv2

    prev8, cur8 = (np.clip(g, 0, 255).astype(np.uint8) for g in (previous, current))
    corners = cv2.goodFeaturesToTrack(prev8, maxCorners=1000, qualityLevel=0.01, minDistance=1, blockSize=3,
                                      mask=mask.astype(np.uint8))
    if corners is None or len(corners) < MIN_FLOW_POINTS:
        return None
    moved, status, _ = cv2.calcOpticalFlowPyrLK(prev8, cur8, corners, None)
    good = status.reshape(-1).astype(bool)
    if good.sum() < MIN_FLOW_POINTS:
        return None
    warp, _ = cv2.estimateAffinePartial2D(corners[good], moved[good], method=cv2.RANSAC)
    return None if warp is None else np.asarray(warp, dtype=np.float64)
