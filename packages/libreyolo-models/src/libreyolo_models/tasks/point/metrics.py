"""Point metrics: precision, recall and F1 of predicted centroids matched to the labelled ones.

Per image and class, predictions are matched one to one with the labelled points by the
Hungarian algorithm on their distances (``scipy.optimize.linear_sum_assignment``), distances in
coordinates normalised to the image (``x / w``, ``y / h``), as upstream LibreYOLO's point
validator measures them. A pair further apart than ``DISTANCE`` (0.05: 5 % of the image's side)
cannot match; among the assignments with the most pairs within reach, the one with the smallest
total distance is taken (infeasible pairs cost more than any feasible set). Matched predictions
are true positives; the rest of the predictions false positives; unmatched labels false negatives.

The scores decide which predictions count: the counts are taken at every confidence threshold of
``CONF_SWEEP`` (0.05, 0.10, ..., 0.95), and the reported precision, recall and F1 are those of
the threshold with the best F1 (macro over the classes labelled or predicted, as upstream
averages), with that threshold (``conf``). ``MLE`` is the mean distance of the matched pairs there
(normalised units); ``count_mae`` the mean absolute error of the per-image point count. Fitness is
that F1. Distributed validation adds the counts over ranks before any ratio is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

DISTANCE = 0.05
"""Largest distance (normalised to the image's sides) at which a prediction matches a labelled point."""
CONF_SWEEP = tuple(round(0.05 * k, 2) for k in range(1, 20))
"""Confidence thresholds the counts are taken at; the one with the best F1 is reported."""
_INFEASIBLE = 1e6


def match_points(predicted: np.ndarray, labelled: np.ndarray, distance: float = DISTANCE
                 ) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one matches of ``[N, 2]`` predicted and ``[M, 2]`` labelled points within ``distance``.

    Returns:
        ``(pairs, distances)``: ``int64 [K, 2]`` (prediction index, label index) and their
        ``float64 [K]`` distances, K as large as possible, then with the smallest total distance.
    """
    if len(predicted) == 0 or len(labelled) == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    from scipy.optimize import linear_sum_assignment  # lazy: scipy costs the package import a second

    d = np.linalg.norm(predicted[:, None, :].astype(np.float64) - labelled[None, :, :].astype(np.float64), axis=-1)
    rows, cols = linear_sum_assignment(np.where(d <= distance, d, _INFEASIBLE))
    ok = d[rows, cols] <= distance
    return np.stack([rows[ok], cols[ok]], axis=1).astype(np.int64), d[rows[ok], cols[ok]]


def f1_score(tp: float, fp: float, fn: float) -> tuple[float, float, float]:
    """``(precision, recall, F1)`` from counts; 0 where a ratio has no denominator."""
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall else 0.0)


@dataclass(frozen=True)
class PointResult:
    """One validation's outcome at its best confidence threshold.

    Attributes:
        precision, recall, f1: macro averages over the classes labelled or predicted there.
        conf: the confidence threshold they were taken at; mle: mean distance of the matches.
        count_mae: mean absolute error of the number of points per image.
        per_class: class id -> ``(labelled, tp, fp, fn)`` at ``conf``.
        n_images: images validated; names: class id -> name.
    """

    precision: float
    recall: float
    f1: float
    conf: float
    mle: float
    count_mae: float
    per_class: dict[int, tuple[int, int, int, int]]
    n_images: int
    names: dict[int, str] = field(default_factory=dict)

    @property
    def fitness(self) -> float:
        return self.f1

    def as_dict(self) -> dict[str, float]:
        return {"metrics/precision": self.precision, "metrics/recall": self.recall, "metrics/F1": self.f1,
                "metrics/conf": self.conf, "metrics/MLE": self.mle, "metrics/count_MAE": self.count_mae}

    def best_fields(self) -> dict[str, float]:
        return {"F1": self.f1, "precision": self.precision, "recall": self.recall}

    def summary(self) -> str:
        return (f"F1 {self.f1:.4f}  P {self.precision:.4f}  R {self.recall:.4f} at conf {self.conf:.2f} "
                f"(within {DISTANCE:g} of the image side; MLE {self.mle:.4f})")

    def table(self) -> str:
        names = {c: self.names.get(c, str(c)) for c in self.per_class}
        width = max([len("Class"), len("all")] + [len(n) for n in names.values()])
        head = f"{'Class':>{width}}{'Images':>8}{'Points':>8}{'P':>8}{'R':>8}{'F1':>8}"
        labelled = sum(v[0] for v in self.per_class.values())
        lines = [head, f"{'all':>{width}}{self.n_images:>8}{labelled:>8}{self.precision:>8.3f}{self.recall:>8.3f}"
                       f"{self.f1:>8.3f}"]
        for c, (n, tp, fp, fn) in sorted(self.per_class.items()):
            p, r, f = f1_score(tp, fp, fn)
            lines.append(f"{names[c]:>{width}}{'':>8}{n:>8}{p:>8.3f}{r:>8.3f}{f:>8.3f}")
        return "\n".join(lines)


class PointMetrics:
    """Accumulates, per confidence threshold and class, the matched and unmatched counts.

    ``counts`` is a ``float64 [T, nc, 3]`` array (tp, fp, fn); ``extra`` ``float64 [T, 3]`` (sum of
    match distances, sum of |predicted - labelled| per image, images): fixed shapes, so ranks add them.
    """

    def __init__(self, nc: int, names: Mapping[int, str] | None = None, *, distance: float = DISTANCE) -> None:
        self.nc, self.names, self.distance = nc, dict(names or {}), distance
        self.counts = np.zeros((len(CONF_SWEEP), nc, 3), dtype=np.float64)
        self.extra = np.zeros((len(CONF_SWEEP), 3), dtype=np.float64)

    def update(self, predicted: np.ndarray, labelled: np.ndarray) -> None:
        """Count one image.

        Args:
            predicted: ``[N, 4]`` rows (x, y, class, score), x and y normalised to the image.
            labelled: ``[M, 3]`` rows (class, x, y), normalised to the image.
        """
        predicted = np.asarray(predicted, np.float64).reshape(-1, 4)
        labelled = np.asarray(labelled, np.float64).reshape(-1, 3)
        for t, conf in enumerate(CONF_SWEEP):
            kept = predicted[predicted[:, 3] >= conf]
            for c in range(self.nc):
                mine, truth = kept[kept[:, 2] == c, :2], labelled[labelled[:, 0] == c, 1:3]
                pairs, dists = match_points(mine, truth, self.distance)
                self.counts[t, c] += (len(pairs), len(mine) - len(pairs), len(truth) - len(pairs))
                self.extra[t, 0] += float(dists.sum())
            self.extra[t, 1] += abs(len(kept) - len(labelled))
            self.extra[t, 2] += 1

    def result(self, counts: np.ndarray | None = None, extra: np.ndarray | None = None) -> PointResult:
        """The best threshold's figures (from ``counts``/``extra`` when given: the totals over ranks)."""
        counts = self.counts if counts is None else counts
        extra = self.extra if extra is None else extra
        best: tuple[float, int] = (-1.0, 0)
        for t in range(len(CONF_SWEEP)):
            f1 = self._macro(counts[t])[2]
            if f1 > best[0]:
                best = (f1, t)
        t = best[1]
        precision, recall, f1 = self._macro(counts[t])
        tp, n_images = float(counts[t, :, 0].sum()), int(extra[t, 2])
        per_class = {c: (int(counts[t, c, 0] + counts[t, c, 2]), int(counts[t, c, 0]), int(counts[t, c, 1]),
                         int(counts[t, c, 2])) for c in range(self.nc) if counts[t, c].sum() > 0}
        return PointResult(precision, recall, f1, CONF_SWEEP[t], float(extra[t, 0]) / tp if tp else 0.0,
                           float(extra[t, 1]) / max(n_images, 1), per_class, n_images, self.names)

    @staticmethod
    def _macro(counts: np.ndarray) -> tuple[float, float, float]:
        """Macro precision, recall, F1 over the classes with any count (labelled or predicted)."""
        scores = [f1_score(*(float(v) for v in row)) for row in counts if float(row.sum()) > 0]
        if not scores:
            return 0.0, 0.0, 0.0
        return tuple(float(np.mean([s[i] for s in scores])) for i in range(3))  # type: ignore[return-value]
