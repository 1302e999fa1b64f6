"""COCO-style matching of one image's instances by any similarity (mask IoU, OKS), with ignored
ground truth, giving detection's ``ImageStats`` (so ``DetectionMetrics`` computes the AP).

The rule is ``pycocotools.cocoeval.COCOeval.evaluateImg``'s, area range "all":

- classes apart; detections by descending score (stable), only the ``max_det`` best per class
  (COCO: 100 for masks, 20 for keypoints), the rest dropped entirely;
- ground truth visited with the non-ignored first (input order kept within each part);
- at each threshold a detection takes the unmatched ground truth of highest similarity >= the
  threshold (capped just below 1), the later of equals; an ignored one only when no non-ignored
  one qualifies. A detection that takes an ignored ground truth is ignored at that threshold
  (neither true nor false positive); ignored ground truth is not counted in the recall.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..detect.matching import IOU_THRESHOLDS, ImageStats, MetricsInputError

_MAX_EFFECTIVE = 1 - 1e-10


def match_similarity(similarity: npt.ArrayLike, scores: npt.ArrayLike, pred_cls: npt.ArrayLike,
                     gt_cls: npt.ArrayLike, *, gt_ignore: npt.ArrayLike | None = None,
                     thresholds: npt.ArrayLike = IOU_THRESHOLDS, max_det: int | None = None,
                     image_id: int = -1) -> ImageStats:
    """Match detections to ground truth by ``similarity [N, M]`` (see the module docstring).

    Args:
        similarity: ``[N, M]`` of every detection against every ground truth (entries of other
            classes are never read).
        scores, pred_cls: ``[N]``; gt_cls: ``[M]``; gt_ignore: ``bool [M]`` (None: none ignored).
        thresholds: ``[T]`` in (0, 1]; max_det: per class (None: all); image_id: the image's index.

    Returns:
        ``ImageStats`` over the kept detections (input order), ``gt_cls`` of the non-ignored ground
        truth only, and the per-threshold ``ignore`` flags.
    """
    sim = np.asarray(similarity, dtype=np.float64)
    conf = np.asarray(scores, dtype=np.float32).reshape(-1)
    pc = np.asarray(pred_cls, dtype=np.int64).reshape(-1)
    gc = np.asarray(gt_cls, dtype=np.int64).reshape(-1)
    ign = np.zeros(len(gc), bool) if gt_ignore is None else np.asarray(gt_ignore, dtype=bool).reshape(-1)
    thr = np.minimum(np.asarray(thresholds, dtype=np.float64).reshape(-1), _MAX_EFFECTIVE)
    if sim.size == 0:
        sim = sim.reshape(len(conf), len(gc))
    if sim.shape != (len(conf), len(gc)) or len(pc) != len(conf) or len(ign) != len(gc):
        raise MetricsInputError(f"match_similarity(image_id={image_id}): similarity {sim.shape} must be "
                                f"[{len(conf)} detections, {len(gc)} ground truths] (scores {len(conf)}, classes "
                                f"{len(pc)}, ground-truth classes {len(gc)}, ignore flags {len(ign)})")
    order = np.argsort(-conf, kind="stable")
    order = order[np.argsort(pc[order], kind="stable")]
    classes, starts = np.unique(pc[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    keep = np.ones(len(conf), bool)
    tp = np.zeros((len(conf), len(thr)), bool)
    ignored = np.zeros_like(tp)
    for c, lo, hi in zip(classes, starts, ends):
        det = order[lo:hi]
        if max_det is not None:
            keep[det[max_det:]] = False
            det = det[:max_det]
        gts = np.flatnonzero(gc == c)
        if not len(gts):
            continue
        gts = gts[np.argsort(ign[gts], kind="stable")]  # non-ignored first, as COCOeval visits them
        hit, to_ignored = _greedy(sim[np.ix_(det, gts)], ign[gts], thr)
        tp[det], ignored[det] = hit, to_ignored
    return ImageStats(tp[keep], conf[keep], pc[keep], gc[~ign], image_id, ignore=ignored[keep])


def _greedy(sim: np.ndarray, ignore: np.ndarray, thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sim [D, G]`` (detections in score order, ground truth non-ignored first) -> (true
    positive, matched an ignored ground truth), each ``bool [D, T]``."""
    n_det, n_gt = sim.shape
    taken = np.zeros((len(thr), n_gt), bool)
    tp = np.zeros((n_det, len(thr)), bool)
    to_ignored = np.zeros_like(tp)
    for d in range(n_det):
        ok = (sim[d][None, :] >= thr[:, None]) & ~taken                    # [T, G]
        if not ok.any():
            continue
        for part, flag in ((~ignore, False), (ignore, True)):
            usable = ok & part[None, :]
            rows = np.flatnonzero(usable.any(1) & ~(tp[d] | to_ignored[d]))
            if not len(rows):
                continue
            values = np.where(usable[rows], sim[d][None, :], -1.0)
            best = n_gt - 1 - np.argmax(values[:, ::-1], axis=1)              # the last of equals
            taken[rows, best] = True
            (to_ignored if flag else tp)[d, rows] = True
    return tp, to_ignored
