"""Matte metrics as BiRefNet's evaluation (``evaluation/metrics.py``, the SOD/DIS protocol) computes
them: MAE, S-measure and max F-measure, per image, averaged over images.

Each image: the prediction as the 8-bit picture a saved matte holds, divided by 255 and stretched
to [0, 1] over its own range (when not flat); the ground truth binarised at ``alpha > 128``
(of 255). Then

- MAE: mean absolute difference;
- S-measure (Fan et al., 2017, alpha 0.5): half object-aware (foreground and background
  similarity ``2x / (x^2 + 1 + sigma_x)``, sigma with ddof 1, weighted by the foreground share),
  half region-aware (four quadrants split at the ground truth's centroid, rounded, +1, each
  scored by the SSIM-like ``4 x y sxy / ((x^2 + y^2)(sx + sy))``, weighted by area); an all-
  background truth scores ``1 - mean(pred)``, all-foreground ``mean(pred)``; floored at 0;
- F-measure (beta^2 = 0.3) at each of 256 thresholds of the 8-bit prediction (``pred >= t``):
  the per-threshold values averaged over images, then the maximum over thresholds (maxF).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = float(np.spacing(1))
BETA2 = 0.3


def prepare(pred: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``uint8 [H, W]`` prediction and ground-truth alpha -> (prediction in [0, 1], foreground mask)."""
    p = pred.astype(np.float64) / 255.0
    if p.max() != p.min():
        p = (p - p.min()) / (p.max() - p.min())
    return p, alpha > 128


def mae(pred: np.ndarray, gt: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - gt)))


def _object_similarity(values: np.ndarray) -> float:
    if values.size == 0:
        return 0.0  # NaN-free where the official mean of an empty set is NaN (its share is 0 then)
    mean = float(values.mean())
    spread = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return 2 * mean / (mean * mean + 1 + spread + EPS)


def _region_ssim(pred: np.ndarray, gt: np.ndarray) -> float:
    n = pred.size
    if n == 0:
        return 0.0
    x, y = float(pred.mean()), float(gt.mean())
    denominator = max(n - 1, 1)
    sx = float(((pred - x) ** 2).sum()) / denominator
    sy = float(((gt - y) ** 2).sum()) / denominator
    sxy = float(((pred - x) * (gt - y)).sum()) / denominator
    a, b = 4 * x * y * sxy, (x * x + y * y) * (sx + sy)
    if a != 0:
        return a / (b + EPS)
    return 1.0 if b == 0 else 0.0


def s_measure(pred: np.ndarray, gt: np.ndarray) -> float:
    """Structure measure of a prediction in [0, 1] against a boolean truth (alpha 0.5)."""
    share = float(gt.mean())
    if share == 0:
        return 1.0 - float(pred.mean())
    if share == 1:
        return float(pred.mean())
    g = gt.astype(np.float64)
    obj = share * _object_similarity((pred * g)[gt]) + (1 - share) * _object_similarity(((1 - pred) * (1 - g))[~gt])
    h, w = gt.shape
    rows, cols = np.nonzero(gt)
    y, x = int(np.round(rows.mean())) + 1, int(np.round(cols.mean())) + 1
    first: tuple[float, ...] = (x * y / (h * w), y * (w - x) / (h * w), (h - y) * x / (h * w))
    weights = (*first, 1 - sum(first))
    quads = ((slice(0, y), slice(0, x)), (slice(0, y), slice(x, w)), (slice(y, h), slice(0, x)), (slice(y, h), slice(x, w)))
    region = sum(wt * _region_ssim(pred[q], g[q]) for wt, q in zip(weights, quads))
    return max(0.0, 0.5 * obj + 0.5 * region)


def f_curve(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """F-measure at thresholds 255 down to 0 of the 8-bit prediction (``float64 [256]``)."""
    levels = (pred * 255).astype(np.uint8)
    fg = np.bincount(levels[gt], minlength=256)[::-1].cumsum()
    bg = np.bincount(levels[~gt], minlength=256)[::-1].cumsum()
    predicted = np.maximum(fg + bg, 1)
    precision, recall = fg / predicted, fg / max(int(gt.sum()), 1)
    numerator = (1 + BETA2) * precision * recall
    return numerator / np.where(numerator == 0, 1, BETA2 * precision + recall)


@dataclass(frozen=True)
class MatteResult:
    """One validation's outcome (``fitness``: S-measure, the headline of DIS/SOD benchmarks)."""

    mae: float
    s_measure: float
    max_f: float
    n_images: int

    @property
    def fitness(self) -> float:
        return self.s_measure

    def as_dict(self) -> dict[str, float]:
        return {"metrics/MAE": self.mae, "metrics/S-measure": self.s_measure, "metrics/maxF": self.max_f}

    def best_fields(self) -> dict[str, float]:
        return {"S-measure": self.s_measure, "MAE": self.mae, "maxF": self.max_f}

    def summary(self) -> str:
        return f"S-measure {self.s_measure:.4f}  MAE {self.mae:.4f}  maxF {self.max_f:.4f}"

    def table(self) -> str:
        return "\n".join([f"{'Images':>8}{'S-measure':>11}{'MAE':>9}{'maxF':>9}",
                          f"{self.n_images:>8}{self.s_measure:>11.4f}{self.mae:>9.4f}{self.max_f:>9.4f}"])


class MatteMetrics:
    """Per-image sums: MAE, S-measure and the 256-point F curve."""

    def __init__(self) -> None:
        self.sums = np.zeros(2 + 256, dtype=np.float64)  # mae, s-measure, F curve
        self.n_images = 0

    def update(self, pred: np.ndarray, alpha: np.ndarray) -> None:
        """Count one image: ``pred`` and ``alpha`` are ``uint8 [H, W]`` of one size."""
        if pred.shape != alpha.shape:
            raise ValueError(f"a {pred.shape} prediction against a {alpha.shape} alpha: they must match")
        p, gt = prepare(pred, alpha)
        self.sums += np.concatenate([[mae(p, gt), s_measure(p, gt)], f_curve(p, gt)])
        self.n_images += 1

    def result(self, sums: np.ndarray | None = None, n_images: int | None = None) -> MatteResult:
        sums = self.sums if sums is None else sums
        count = self.n_images if n_images is None else n_images
        means = sums / max(count, 1)
        return MatteResult(float(means[0]), float(means[1]), float(means[2:].max()), count)
