"""A constant-velocity Kalman filter over boxes in ``xyah`` form (centre x, centre y, aspect
ratio w/h, height), the motion model ByteTrack and SORT use.

State: 8 numbers, ``[cx, cy, a, h, vcx, vcy, va, vh]``; one step is one frame. The noise of every
coordinate except the aspect ratio scales with the box height, so a large box near the camera
may move more pixels per frame than a small one far away. Aspect ratio is nearly rigid.

Every function takes a single state (``mean [8]``, ``cov [8, 8]``) or a stack of them
(``mean [N, 8]``, ``cov [N, 8, 8]``) and returns new arrays (inputs are not changed).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

# Standard deviations per frame, as fractions of the box height (the conventional SORT/ByteTrack
# weights): position noise 1/20 of the height, velocity noise 1/160 of it.
POSITION_STD_PER_HEIGHT = 1.0 / 20
VELOCITY_STD_PER_HEIGHT = 1.0 / 160
# The aspect ratio is barely allowed to drift: fixed, tiny standard deviations.
ASPECT_STD, ASPECT_VELOCITY_STD, ASPECT_MEASURE_STD = 1e-2, 1e-5, 1e-1

_TRANSITION = np.eye(8)
_TRANSITION[:4, 4:] = np.eye(4)          # position += velocity (one frame)
_OBSERVATION = np.eye(4, 8)              # the measurement is the position half of the state


def _per_height(h: np.ndarray, weight: float, aspect_std: float) -> np.ndarray:
    """``[..., 4]`` standard deviations ``(w*h, w*h, aspect_std, w*h)`` for heights ``h [...]``."""
    std = np.stack([weight * h, weight * h, np.full_like(h, aspect_std), weight * h], axis=-1)
    return std


def initiate(measurement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A new track's state from its first box ``xyah [4]`` (or ``[N, 4]``): zero velocity, and an
    uncertainty of two position steps and ten velocity steps, so the second detection may land
    well away from the first and still pull the velocity to it."""
    z = np.asarray(measurement, dtype=np.float64)
    mean = np.concatenate([z, np.zeros_like(z)], axis=-1)
    h = z[..., 3]
    std = np.concatenate([2 * _per_height(h, POSITION_STD_PER_HEIGHT, ASPECT_STD),
                          10 * _per_height(h, VELOCITY_STD_PER_HEIGHT, ASPECT_VELOCITY_STD)], axis=-1)
    cov = np.zeros(std.shape + (8,))
    idx = np.arange(8)
    cov[..., idx, idx] = std**2
    return mean, cov


def predict(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead: move by the velocity; uncertainty grows by the process noise, which is
    sized by the current height."""
    h = mean[..., 3]
    std = np.concatenate([_per_height(h, POSITION_STD_PER_HEIGHT, ASPECT_STD),
                          _per_height(h, VELOCITY_STD_PER_HEIGHT, ASPECT_VELOCITY_STD)], axis=-1)
    noise = np.zeros(std.shape + (8,))
    idx = np.arange(8)
    noise[..., idx, idx] = std**2
    new_mean = mean @ _TRANSITION.T
    new_cov = _TRANSITION @ cov @ _TRANSITION.T + noise
    return new_mean, new_cov


def project(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The state's distribution in measurement space: ``xyah [.., 4]`` and its ``[.., 4, 4]``
    covariance, measurement noise included."""
    std = _per_height(mean[..., 3], POSITION_STD_PER_HEIGHT, ASPECT_MEASURE_STD)
    noise = np.zeros(std.shape + (4,))
    idx = np.arange(4)
    noise[..., idx, idx] = std**2
    return mean @ _OBSERVATION.T, _OBSERVATION @ cov @ _OBSERVATION.T + noise


def update(mean: np.ndarray, cov: np.ndarray, measurement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct one state (``mean [8]``, ``cov [8, 8]``) with a matched box ``xyah [4]``.

    The gain solves against the innovation covariance by Cholesky (it is symmetric positive
    definite by construction) instead of inverting it.
    """
    z_mean, z_cov = project(mean, cov)
    cross = cov @ _OBSERVATION.T                                   # [8, 4]
    factor = scipy.linalg.cho_factor(z_cov, lower=True, check_finite=False)
    gain = scipy.linalg.cho_solve(factor, cross.T, check_finite=False).T   # [8, 4]
    innovation = np.asarray(measurement, dtype=np.float64) - z_mean
    return mean + innovation @ gain.T, cov - gain @ z_cov @ gain.T


def xyxy_to_xyah(boxes: np.ndarray) -> np.ndarray:
    """``[..., 4]`` corners -> centre, aspect ratio (w/h), height."""
    b = np.asarray(boxes, dtype=np.float64)
    w, h = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
    return np.stack([(b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2, w / np.maximum(h, 1e-9), h], axis=-1)


def xyah_to_xyxy(xyah: np.ndarray) -> np.ndarray:
    """``[..., 4]`` centre, aspect ratio, height -> corners."""
    cx, cy, a, h = (xyah[..., i] for i in range(4))
    w = a * h
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)
