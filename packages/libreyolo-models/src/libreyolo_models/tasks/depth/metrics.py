"""Depth validation metrics for relative (affine-invariant inverse-depth) models, as MiDaS and
Depth Anything evaluate them zero-shot.

Per picture, on the pixels with a measurement in the evaluated range: the prediction (larger is
nearer) is fitted to the ground truth's disparity ``1 / depth`` by least squares, ``s * pred + t``;
the fitted disparity, floored at ``1 / max_depth``, gives the predicted depth. Then
``AbsRel = mean(|d - d*| / d*)`` and ``delta1`` = the share of pixels with ``max(d / d*, d* / d) <
1.25``; both are averaged over pictures. ``delta1`` is the fitness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DELTA = 1.25


def align_disparity(pred: np.ndarray, disparity: np.ndarray) -> tuple[float, float]:
    """Least-squares ``(s, t)`` minimising ``|s * pred + t - disparity|`` over the given pixels."""
    a = np.stack([pred.astype(np.float64), np.ones(pred.size)], axis=1)
    (s, t), *_ = np.linalg.lstsq(a, disparity.astype(np.float64), rcond=None)
    return float(s), float(t)


def score_depth(pred: np.ndarray, depth: np.ndarray, max_depth: float) -> tuple[float, float] | None:
    """``(AbsRel, delta1)`` of one picture's ``pred`` (relative inverse depth, ``[H, W]``) against
    ``depth`` (metres, NaN where unmeasured); None when fewer than two pixels are measured."""
    valid = np.isfinite(depth) & np.isfinite(pred)
    if valid.sum() < 2:
        return None
    truth = depth[valid].astype(np.float64)
    s, t = align_disparity(pred[valid], 1.0 / truth)
    fitted = np.maximum(s * pred[valid].astype(np.float64) + t, 1.0 / max_depth)
    estimate = 1.0 / fitted
    abs_rel = float(np.mean(np.abs(estimate - truth) / truth))
    delta1 = float(np.mean(np.maximum(estimate / truth, truth / estimate) < DELTA))
    return abs_rel, delta1


@dataclass(frozen=True)
class DepthResult:
    """One validation's outcome (the ``TaskMetrics`` of the depth task)."""

    abs_rel: float
    delta1: float
    n_images: int
    n_scored: int

    @property
    def fitness(self) -> float:
        return self.delta1

    def as_dict(self) -> dict[str, float]:
        return {"metrics/AbsRel": self.abs_rel, "metrics/delta1": self.delta1}

    def best_fields(self) -> dict[str, float]:
        return {"delta1": self.delta1, "AbsRel": self.abs_rel}

    def summary(self) -> str:
        return (f"AbsRel {self.abs_rel:.4f}  delta1 {self.delta1:.4f}  (scale-and-shift aligned, {self.n_scored} of "
                f"{self.n_images} images with depth)")

    def table(self) -> str:
        return f"{'Images':>8}{'Scored':>8}{'AbsRel':>10}{'delta1':>10}\n" \
               f"{self.n_images:>8}{self.n_scored:>8}{self.abs_rel:>10.4f}{self.delta1:>10.4f}"


def total(sums: np.ndarray, n_images: int) -> DepthResult:
    """``float64 [3]`` sums over pictures (AbsRel, delta1, pictures scored) -> the result."""
    abs_rel, delta1, scored = (float(v) for v in np.asarray(sums, dtype=np.float64).reshape(3))
    n = max(scored, 1.0)
    return DepthResult(abs_rel / n, delta1 / n, n_images, int(scored))
