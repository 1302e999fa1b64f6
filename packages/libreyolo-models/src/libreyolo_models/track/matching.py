"""Association of tracks and detections: IoU cost matrices and a thresholded optimal assignment
(``scipy.optimize.linear_sum_assignment``, the Hungarian-style solver scipy maintains)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a [N, 4]`` with every box in ``b [M, 4]`` (x1, y1, x2, y2) -> ``[N, M]``."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=-1)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=-1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def iou_cost(track_boxes: np.ndarray, det_boxes: np.ndarray, det_scores: np.ndarray | None = None) -> np.ndarray:
    """``1 - IoU`` between tracks and detections; with ``det_scores`` the IoU is first multiplied
    by each detection's score (ByteTrack's ``fuse_score``: a confident detection wins a tie)."""
    similarity = iou_matrix(track_boxes, det_boxes)
    if det_scores is not None:
        similarity = similarity * np.asarray(det_scores, dtype=np.float64)[None, :]
    return 1.0 - similarity


def assign(cost: np.ndarray, max_cost: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """The minimum-cost one-to-one matching of rows to columns, keeping only pairs whose cost is
    at most ``max_cost``.

    Returns ``(pairs, unmatched_rows, unmatched_cols)``, each sorted. Pairs over the threshold are
    dropped after solving (a pair too far apart stays unmatched rather than stealing a partner).
    """
    n_rows, n_cols = cost.shape
    if n_rows == 0 or n_cols == 0:
        return [], list(range(n_rows)), list(range(n_cols))
    rows, cols = linear_sum_assignment(cost)
    pairs = sorted((int(r), int(c)) for r, c in zip(rows, cols) if cost[r, c] <= max_cost)
    matched_rows = {r for r, _ in pairs}
    matched_cols = {c for _, c in pairs}
    return (pairs, [r for r in range(n_rows) if r not in matched_rows],
            [c for c in range(n_cols) if c not in matched_cols])
