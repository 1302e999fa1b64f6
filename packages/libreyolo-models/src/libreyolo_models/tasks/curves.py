"""Per-class precision, recall and F1 as functions of the score threshold, and PR curves.

Input: per class, its detections' scores in descending order with whether each is a true
positive at IoU 0.50, and its number of ground-truth boxes (``DetectionMetrics.class_curves``).
A detection counts at threshold ``t`` when its score is >= ``t``, as in the metrics' F1 operating
point, so the curves and the reported P / R agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

THRESHOLDS = np.linspace(0.0, 1.0, 101)
"""Score thresholds the P / R / F1 curves are sampled at."""

RECALL_POINTS = np.linspace(0.0, 1.0, 101)
"""Recall values the PR curves are sampled at (COCO's 101 points)."""


@dataclass(frozen=True)
class ClassCurves:
    """Curves of one class, each sampled at ``THRESHOLDS`` (``pr``: at ``RECALL_POINTS``)."""

    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    pr: np.ndarray       # interpolated precision (monotone envelope) at each recall point
    ap50: float          # area under ``pr``: the class's AP at IoU 0.50


def class_curves(scores: np.ndarray, tp: np.ndarray, n_gt: int) -> ClassCurves:
    """One class's curves from its ``scores`` (descending), ``tp`` flags and ground-truth count."""
    tp_cum = np.concatenate([[0], np.cumsum(tp)]).astype(np.float64)
    kept = len(scores) - np.searchsorted(scores[::-1], THRESHOLDS, side="left")  # detections >= t
    tp_kept = tp_cum[kept]
    precision = np.divide(tp_kept, kept, out=np.zeros(len(THRESHOLDS)), where=kept > 0)
    recall = tp_kept / max(n_gt, 1)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(len(THRESHOLDS)),
                   where=(precision + recall) > 0)
    if len(scores):
        p_all = tp_cum[1:] / np.arange(1, len(scores) + 1)
        r_all = tp_cum[1:] / max(n_gt, 1)
        envelope = np.maximum.accumulate(p_all[::-1])[::-1]
        idx = np.searchsorted(r_all, RECALL_POINTS, side="left")
        pr = np.where(idx < len(scores), envelope[np.minimum(idx, len(scores) - 1)], 0.0)
    else:
        pr = np.zeros(len(RECALL_POINTS))
    return ClassCurves(precision, recall, f1, pr, float(pr.mean()))


def all_class_curves(curves: Mapping[int, tuple[np.ndarray, np.ndarray, int]]) -> dict[int, ClassCurves]:
    """``class_curves`` for every class of ``DetectionMetrics.class_curves()``'s output."""
    return {c: class_curves(scores, tp, n_gt) for c, (scores, tp, n_gt) in curves.items()}
