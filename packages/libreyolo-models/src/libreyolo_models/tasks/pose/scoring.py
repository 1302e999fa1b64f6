"""Object Keypoint Similarity and one image's pose statistics for validation (COCO ``keypoints``:
OKS, at most 20 detections per class and image, objects without a labelled keypoint ignored).

OKS of a detection against a ground truth with labelled keypoints is the mean over those
keypoints of ``exp(-d^2 / (2 * area * (2 * sigma)^2))``; against one without, the distances are
to the ground truth's box grown by its size on every side (COCOeval's rule, which only matters
for which detections such an ignored object absorbs). ``area`` is the object's area in pixels:
COCO annotations give the segment's; here it is ``AREA_PER_BOX`` times the box's for every source
(YOLO pose labels have no segment; Ultralytics uses the same factor).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...contract.instances import InstancePrediction
from ..detect.matching import ImageStats
from ..instances.geometry import InstanceSample
from ..instances.matching import match_similarity

MAX_DET = 20
"""COCO's ``maxDets`` for keypoints (per image and class)."""
AREA_PER_BOX = 0.53
"""An object's area as a share of its box's, for OKS."""


def oks_matrix(pred: npt.ArrayLike, gt: npt.ArrayLike, gt_boxes: npt.ArrayLike, areas: npt.ArrayLike,
               sigmas: Sequence[float]) -> np.ndarray:
    """OKS ``float64 [N, M]`` of predicted keypoints ``[N, K, >= 2]`` (x, y) against ground truth
    ``[M, K, 3]`` (x, y, visibility) with boxes ``[M, 4]`` x1, y1, x2, y2 and ``areas [M]``, as
    pycocotools' ``computeOks``."""
    p = np.asarray(pred, dtype=np.float64)[..., :2]
    g = np.asarray(gt, dtype=np.float64)
    boxes = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4)
    area = np.asarray(areas, dtype=np.float64).reshape(-1)
    n, m = len(p), len(g)
    if n == 0 or m == 0:
        return np.zeros((n, m))
    variances = (np.asarray(sigmas, dtype=np.float64) * 2) ** 2
    labelled = g[..., 2] > 0                                                    # [M, K]
    dx = p[:, None, :, 0] - g[None, :, :, 0]                                    # [N, M, K]
    dy = p[:, None, :, 1] - g[None, :, :, 1]
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    x0, x1 = (boxes[:, 0] - w)[None, :, None], (boxes[:, 0] + 2 * w)[None, :, None]
    y0, y1 = (boxes[:, 1] - h)[None, :, None], (boxes[:, 1] + 2 * h)[None, :, None]
    px, py = p[:, None, :, 0], p[:, None, :, 1]
    outside_x = np.maximum(0, x0 - px) + np.maximum(0, px - x1)
    outside_y = np.maximum(0, y0 - py) + np.maximum(0, py - y1)
    none = np.logical_not(np.any(labelled, axis=1))[None, :, None]
    dx, dy = np.where(none, outside_x, dx), np.where(none, outside_y, dy)
    e = (dx**2 + dy**2) / variances / (area[None, :, None] + np.spacing(1)) / 2
    weight = np.where(none, True, labelled[None])
    return (np.exp(-e) * weight).sum(-1) / weight.sum(-1)


def score_keypoints(prediction: InstancePrediction, sample: InstanceSample, sigmas: Sequence[float], *,
                    max_det: int = MAX_DET) -> ImageStats:
    """One image's OKS ``ImageStats`` (see the module docstring)."""
    if sample.keypoints is None or prediction.keypoints is None:
        raise ValueError("score_keypoints needs predicted and ground-truth keypoints (a pose model on pose data)")
    det = prediction.det.float().numpy()
    boxes = sample.boxes.numpy()
    gt = sample.keypoints.numpy()
    areas = AREA_PER_BOX * (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    sim = oks_matrix(prediction.keypoints.float().numpy(), gt, boxes, areas, sigmas)
    ignore = np.logical_not((gt[..., 2] > 0).any(axis=-1)) if len(gt) else np.zeros(0, bool)
    return match_similarity(sim, det[:, 4], det[:, 5].astype(np.int64), sample.classes.numpy(), gt_ignore=ignore,
                            max_det=max_det, image_id=sample.index)
