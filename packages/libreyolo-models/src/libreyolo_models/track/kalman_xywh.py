"""A constant-velocity Kalman filter over boxes in ``xywh`` form (centre x, centre y, width,
height), the motion model BoT-SORT uses in place of SORT's aspect-ratio form.

State: 8 numbers, ``[cx, cy, w, h, vcx, vcy, vw, vh]``; one step is one frame. Width and height
each get their own noise, sized by themselves (horizontal coordinates by the width, vertical ones
by the height), so a box that changes shape (a person turning, a car seen from the side) is
followed as well as one that only changes size. The fractions are those of ``kalman`` (the
xyah filter), so both filters trust a measurement equally.

Functions take one state (``mean [8]``, ``cov [8, 8]``) or a stack (``[N, 8]``, ``[N, 8, 8]``) and
return new arrays, like ``kalman``'s.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from .kalman import POSITION_STD_PER_HEIGHT, VELOCITY_STD_PER_HEIGHT

_TRANSITION = np.eye(8)
_TRANSITION[:4, 4:] = np.eye(4)
_OBSERVATION = np.eye(4, 8)


def _per_size(wh: np.ndarray, weight: float) -> np.ndarray:
    """``[..., 4]`` standard deviations ``weight * (w, h, w, h)`` for sizes ``wh [..., 2]``."""
    return weight * np.concatenate([wh, wh], axis=-1)


def _diag(std: np.ndarray) -> np.ndarray:
    n = std.shape[-1]
    out = np.zeros(std.shape + (n,))
    idx = np.arange(n)
    out[..., idx, idx] = std**2
    return out


def initiate(xywh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A new track's state from its first box: zero velocity, wide uncertainty (as ``kalman.initiate``)."""
    z = np.asarray(xywh, dtype=np.float64)
    mean = np.concatenate([z, np.zeros_like(z)], axis=-1)
    wh = z[..., 2:4]
    std = np.concatenate([_per_size(wh, 2 * POSITION_STD_PER_HEIGHT), _per_size(wh, 10 * VELOCITY_STD_PER_HEIGHT)],
                         axis=-1)
    return mean, _diag(std)


def predict(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead; the process noise is sized by the current width and height."""
    wh = mean[..., 2:4]
    std = np.concatenate([_per_size(wh, POSITION_STD_PER_HEIGHT), _per_size(wh, VELOCITY_STD_PER_HEIGHT)], axis=-1)
    return mean @ _TRANSITION.T, _TRANSITION @ cov @ _TRANSITION.T + _diag(std)


def update(mean: np.ndarray, cov: np.ndarray, xywh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct one state with a matched box (Cholesky solve, as ``kalman.update``)."""
    z_cov = _OBSERVATION @ cov @ _OBSERVATION.T + _diag(_per_size(mean[2:4], POSITION_STD_PER_HEIGHT))
    cross = cov @ _OBSERVATION.T
    factor = scipy.linalg.cho_factor(z_cov, lower=True, check_finite=False)
    gain = scipy.linalg.cho_solve(factor, cross.T, check_finite=False).T
    innovation = np.asarray(xywh, dtype=np.float64) - mean[:4]
    return mean + innovation @ gain.T, cov - gain @ z_cov @ gain.T


def xyxy_to_xywh(boxes: np.ndarray) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64)
    return np.stack([(b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2, b[..., 2] - b[..., 0],
                     b[..., 3] - b[..., 1]], axis=-1)


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    cx, cy, w, h = (xywh[..., i] for i in range(4))
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)
