"""COCO-style matching of one image's detections to its ground truth.

Validation reduces each image to an ``ImageStats`` right after post-processing: which detection
is a true positive at which IoU threshold, plus scores and classes. Boxes are not needed after
this step, so what crosses ranks in sharded validation is small, and the metric
(``metrics.DetectionMetrics``) is a pure function of a bag of ``ImageStats``.

The matching rule is the one ``pycocotools.cocoeval.COCOeval.evaluateImg`` applies for bbox with
area range "all" and no crowd boxes (YOLO labels have none), so that our AP equals COCO's:

- classes are matched separately (a detection can only match ground truth of its own class);
- detections are visited by descending score, stable on input order for equal scores;
- at each IoU threshold independently, a detection takes the still-unmatched ground-truth box
  with the highest IoU that is >= the threshold; among equal IoUs the later box wins, exactly as
  COCOeval's ``<`` comparison does;
- IoU has no "+1 pixel" term (boxes are continuous, as in pycocotools bbox mode).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from libreyolo_models.errors import LibreYOLOError

IOU_THRESHOLDS: np.ndarray = np.linspace(0.5, 0.95, 10)
"""The ten COCO IoU thresholds 0.50, 0.55, ..., 0.95 (the columns of ``ImageStats.tp``)."""

# COCOeval caps the threshold just below 1 so an IoU of exactly 1.0 still matches at t=1.0.
_MAX_EFFECTIVE_IOU = 1 - 1e-10


class MetricsInputError(LibreYOLOError, ValueError):
    """Detections, ground truth or match results that the metric cannot use (message says why)."""


@dataclass(frozen=True, eq=False)  # eq=False: element-wise array equality has no single truth value
class ImageStats:
    """Everything the metric needs from one image; small and picklable (no boxes).

    Attributes:
        tp: ``bool [N, T]``; ``tp[i, t]`` is True when detection ``i`` matched a ground-truth box
            at IoU threshold ``t`` (the columns follow the thresholds given to ``match_image``).
        conf: ``float32 [N]`` detection scores in the model's output range (usually [0, 1]).
        pred_cls: ``int64 [N]`` detected class ids.
        gt_cls: ``int64 [M]`` ground-truth class ids (``M`` may be 0: a background image).
        image_id: the image's index in the validation split, or -1 when unknown. With ids, the
            merged result breaks exact score ties in image order as COCOeval does, and an image
            evaluated twice (a distributed sampler pads shards by repeating images) counts once.
        ignore: ``bool [N, T]``: detection ``i`` matched an ignored ground truth at threshold ``t``
            (COCOeval's ``dtIg``: pose instances without a labelled keypoint), so it is neither a
            true nor a false positive there. None: no detection is ignored (boxes and masks).

    Arrays are converted to the dtypes above on construction, so stats built by hand, unpickled
    on another rank or produced by ``match_image`` are interchangeable.
    """

    tp: np.ndarray
    conf: np.ndarray
    pred_cls: np.ndarray
    gt_cls: np.ndarray
    image_id: int = -1
    ignore: np.ndarray | None = None

    def __post_init__(self) -> None:
        tp = np.asarray(self.tp, dtype=bool)
        conf = np.asarray(self.conf, dtype=np.float32).reshape(-1)
        pred_cls = np.asarray(self.pred_cls, dtype=np.int64).reshape(-1)
        gt_cls = np.asarray(self.gt_cls, dtype=np.int64).reshape(-1)
        if tp.ndim == 1 and tp.size == 0:
            tp = tp.reshape(0, 0)
        if tp.ndim != 2 or not (len(tp) == len(conf) == len(pred_cls)):
            raise MetricsInputError(
                f"ImageStats(image_id={self.image_id}): tp {tp.shape}, conf {conf.shape} and "
                f"pred_cls {pred_cls.shape} must describe the same N detections as [N, T], [N], [N]; "
                "build it with match_image() or pass arrays of matching length"
            )
        if not np.all(np.isfinite(conf)):
            bad = conf[~np.isfinite(conf)][0]
            raise MetricsInputError(
                f"ImageStats(image_id={self.image_id}): detection score {bad} is not finite; "
                "check the model output (NaN scores usually mean diverged weights)"
            )
        ignore = np.zeros_like(tp) if self.ignore is None else np.asarray(self.ignore, dtype=bool).reshape(tp.shape)
        for name, value in (("tp", tp), ("conf", conf), ("pred_cls", pred_cls), ("gt_cls", gt_cls),
                            ("ignore", ignore)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "image_id", int(self.image_id))

    @property
    def n_thresholds(self) -> int:
        """Number of IoU thresholds (columns of ``tp``); 0 only for an image with no detections."""
        return int(self.tp.shape[1])

    def digest(self) -> bytes:
        """A content fingerprint: orders images canonically when ids are missing or repeated."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.asarray(self.tp.shape, dtype=np.int64).tobytes())
        for array in (self.tp, self.conf, self.pred_cls, self.gt_cls, self.ignore):
            h.update(np.ascontiguousarray(array).tobytes())
        return h.digest()


def match_image(
    pred_boxes: npt.ArrayLike,
    pred_scores: npt.ArrayLike,
    pred_cls: npt.ArrayLike,
    gt_boxes: npt.ArrayLike,
    gt_cls: npt.ArrayLike,
    *,
    iou_thresholds: npt.ArrayLike = IOU_THRESHOLDS,
    image_id: int = -1,
    max_det: int | None = None,
) -> ImageStats:
    """Match one image's detections to its ground truth, COCO style, at every IoU threshold.

    Inputs may be numpy arrays, lists or torch tensors (any device; they are copied to host).
    Boxes of one image share one unit (pixels of the original image, or normalized): IoU does
    not care which, as long as predictions and ground truth agree.

    Args:
        pred_boxes: ``[N, 4]`` detections, xyxy (x1, y1, x2, y2).
        pred_scores: ``[N]`` detection scores; compared as float32, the precision models emit.
        pred_cls: ``[N]`` integer class ids of the detections.
        gt_boxes: ``[M, 4]`` ground-truth boxes, xyxy, same unit as ``pred_boxes``.
        gt_cls: ``[M]`` integer class ids of the ground truth.
        iou_thresholds: ``[T]`` IoU thresholds in (0, 1]; the COCO ten by default.
        image_id: the image's index in the split (see ``ImageStats.image_id``); -1 if unknown.
        max_det: keep only the ``max_det`` best-scoring detections per class, dropping the rest
            entirely (not counted as false positives). ``100`` reproduces COCOeval's
            ``maxDets=100``; the default ``None`` keeps everything the post-process kept.

    Returns:
        ``ImageStats`` whose rows follow the input order of the kept detections.

    Raises:
        MetricsInputError: shapes that disagree, boxes that are not ``[*, 4]``, thresholds outside (0, 1].
    """
    pb = _as_boxes(pred_boxes, "pred_boxes")
    gb = _as_boxes(gt_boxes, "gt_boxes")
    scores = _as_vector(pred_scores, np.float32, "pred_scores")
    pc = _as_vector(pred_cls, np.int64, "pred_cls")
    gc = _as_vector(gt_cls, np.int64, "gt_cls")
    if not (len(pb) == len(scores) == len(pc)):
        raise MetricsInputError(
            f"match_image(image_id={image_id}): pred_boxes has {len(pb)} rows, pred_scores {len(scores)}, "
            f"pred_cls {len(pc)}; they must describe the same detections"
        )
    if len(gb) != len(gc):
        raise MetricsInputError(
            f"match_image(image_id={image_id}): gt_boxes has {len(gb)} rows but gt_cls {len(gc)}; "
            "they must describe the same ground-truth boxes"
        )
    thresholds = _as_thresholds(iou_thresholds)
    if max_det is not None and max_det < 1:
        raise MetricsInputError(f"match_image: max_det={max_det} must be a positive integer or None (no cap)")

    # Group detections by class, each group by descending score (stable: COCOeval's mergesort).
    order = np.argsort(-scores, kind="stable")
    order = order[np.argsort(pc[order], kind="stable")]
    classes, starts = np.unique(pc[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    keep = np.ones(len(pb), dtype=bool)
    if max_det is not None:
        rank_in_class = np.arange(len(order)) - np.repeat(starts, ends - starts)
        keep[order[rank_in_class >= max_det]] = False
    tp = np.zeros((len(pb), len(thresholds)), dtype=bool)
    for i in np.flatnonzero(np.isin(classes, gc)):  # classes without ground truth: all FP, no IoU
        det = order[starts[i] : ends[i]][:max_det]
        gt = np.flatnonzero(gc == classes[i])
        tp[det] = _greedy_match(pairwise_iou(pb[det], gb[gt]), thresholds)
    return ImageStats(tp[keep], scores[keep], pc[keep], gc, image_id)


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of xyxy boxes ``a [N, 4]`` vs ``b [M, 4]`` -> ``float64 [N, M]``, as pycocotools bbox.

    Boxes that do not overlap (including zero-area boxes) get exactly 0, never NaN.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    w = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    h = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    overlaps = (w > 0) & (h > 0)
    inter = np.where(overlaps, w * h, 0.0)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=overlaps)


def _greedy_match(iou: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``iou [D, G]`` with detections already in score order -> ``tp [D, T]``.

    Vectorized over thresholds and ground truth; only the visit over detections is sequential,
    because each match removes a ground-truth box for every later detection.
    """
    n_det, n_gt = iou.shape
    tp = np.zeros((n_det, len(thresholds)), dtype=bool)
    effective = np.minimum(thresholds, _MAX_EFFECTIVE_IOU)[:, None]  # [T, 1]
    taken = np.zeros((len(thresholds), n_gt), dtype=bool)  # [T, G]
    candidates: np.ndarray | list[int] = np.flatnonzero(iou.max(axis=1) >= effective.min()) if n_gt else []
    for d in candidates:
        ok = (iou[d][None, :] >= effective) & ~taken
        hit = ok.any(axis=1)
        if not hit.any():
            continue
        masked = np.where(ok, iou[d][None, :], -1.0)
        best = n_gt - 1 - np.argmax(masked[:, ::-1], axis=1)  # the last of equal maxima, as COCOeval
        t_hit = np.flatnonzero(hit)
        taken[t_hit, best[t_hit]] = True
        tp[d, t_hit] = True
        if taken.all():
            break
    return tp


def _to_numpy(x: npt.ArrayLike) -> np.ndarray:
    # Duck-typed torch support: this module must not import torch (the metric is numpy-only).
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _as_boxes(x: npt.ArrayLike, name: str) -> np.ndarray:
    boxes = _to_numpy(x).astype(np.float64, copy=False)
    if boxes.size == 0:
        return boxes.reshape(0, 4)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise MetricsInputError(
            f"match_image: {name} has shape {tuple(boxes.shape)}; expected [N, 4] xyxy boxes "
            "(slice off score/class columns before matching)"
        )
    return boxes


def _as_vector(x: npt.ArrayLike, dtype: type, name: str) -> np.ndarray:
    array = _to_numpy(x)
    if array.ndim > 1:
        raise MetricsInputError(
            f"match_image: {name} has shape {tuple(array.shape)}; expected a 1-D [N] array"
        )
    return array.reshape(-1).astype(dtype, copy=False)


def _as_thresholds(x: npt.ArrayLike) -> np.ndarray:
    thresholds = np.asarray(x, dtype=np.float64).reshape(-1)
    if thresholds.size == 0 or np.any((thresholds <= 0) | (thresholds > 1)):
        raise MetricsInputError(
            f"match_image: iou_thresholds={thresholds.tolist()} must be a non-empty list of values "
            "in (0, 1]; the default is IOU_THRESHOLDS (0.50:0.05:0.95)"
        )
    return thresholds
