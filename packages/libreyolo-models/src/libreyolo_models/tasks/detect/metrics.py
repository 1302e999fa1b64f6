"""Detection metrics over a bag of per-image match results: mAP50, mAP50-95, P, R, per-class AP.

AP is computed exactly as ``pycocotools`` ``COCOeval`` does for bbox, area "all", one class at a
time: every detection of the class over all images, sorted by descending score with a stable
sort; cumulative TP and FP; recall = TP / number of ground-truth boxes; precision made monotone
from the right; sampled at the 101 recall points 0.00:0.01:1.00 (a point past the highest recall
reached counts as 0); AP = mean of the samples. Classes without ground truth are left out of the
means (COCO's -1). mAP50 is the mean over classes at IoU 0.50, mAP50-95 over classes and the ten
thresholds. No detections, or no ground truth at all, give zeros, never NaN.

Where we differ from pycocotools, on purpose:

- maxDets: COCO keeps the 100 best detections per image and class. We score whatever the
  post-process kept (it caps detections per image, not per class). ``match_image(max_det=100)``
  reproduces COCO's cap when numbers must be comparable with published COCO results.
- Precision and recall: COCO reports none at a fixed confidence. We report both at the single
  confidence threshold that maximizes the mean over classes of F1 at IoU 0.50 (one operating
  point for all classes, the way a deployed model is run), as means over classes with ground
  truth; a class with no detection above the threshold has precision 0. The threshold is searched
  over the distinct detection scores; past ``_MAX_CONF_CANDIDATES`` distinct scores, over that
  many scores evenly spaced in rank, which keeps the search cheap on large validation sets.

Distributed validation: each rank calls ``match_image`` on its shard and keeps a
``DetectionMetrics``; rank 0 gathers ``metrics.image_stats`` from every rank (for instance with
``torch.distributed.gather_object``) and calls ``merge``. The result does not depend on how
images were split or in which order the lists arrive: images are put in a canonical order
(``image_id``, then content) before anything is computed, and an ``image_id`` seen twice (a
distributed sampler pads shards by repeating images) counts once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from libreyolo_models.tasks.detect.matching import IOU_THRESHOLDS, ImageStats, MetricsInputError

log = logging.getLogger(__name__)

REC_THRESHOLDS: np.ndarray = np.linspace(0.0, 1.0, 101)
"""COCO's 101 recall sampling points 0.00, 0.01, ..., 1.00."""

_MAX_CONF_CANDIDATES = 1000
_EPS = np.spacing(1)  # COCOeval's guard in TP / (TP + FP); kept so values match to the last bit


@dataclass(frozen=True)
class ClassAP:
    """One class's results. ``precision`` and ``recall`` are at ``MetricsResult.conf_threshold``.

    ``n_images`` counts validation images with at least one ground-truth box of the class.
    """

    ap50: float
    ap50_95: float
    n_gt: int
    n_pred: int
    precision: float
    recall: float
    n_images: int = 0


@dataclass(frozen=True)
class MetricsResult:
    """The outcome of one validation.

    Attributes:
        map50: mean over classes with ground truth of AP at IoU 0.50, in [0, 1].
        map50_95: mean over those classes and the ten IoU thresholds 0.50:0.05:0.95.
        precision: mean class precision at IoU 0.50 and ``conf_threshold``.
        recall: mean class recall at IoU 0.50 and ``conf_threshold``.
        per_class: class id -> ``ClassAP``, for every class with ground truth (the ones averaged).
        n_images: validation images counted (each image id once).
        n_gt: ground-truth boxes over all classes.
        n_pred: detections over all classes.
        conf_threshold: the score threshold maximizing mean F1 at IoU 0.50 (0 without detections).
        names: class id -> name, for ``table``.
    """

    map50: float
    map50_95: float
    precision: float
    recall: float
    per_class: dict[int, ClassAP]
    n_images: int
    n_gt: int
    n_pred: int = 0
    conf_threshold: float = 0.0
    names: dict[int, str] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)   # val/<term>_loss, when training validates

    @property
    def fitness(self) -> float:
        """What "best" means: mostly mAP50-95, a little mAP50 (ties broken toward easier detections)."""
        return 0.1 * self.map50 + 0.9 * self.map50_95

    def as_dict(self) -> dict[str, float]:
        """The headline numbers under the keys trainers log and ``results.csv`` columns use."""
        return {
            "metrics/precision": self.precision,
            "metrics/recall": self.recall,
            "metrics/mAP50": self.map50,
            "metrics/mAP50-95": self.map50_95,
            **self.losses,
        }

    def best_fields(self) -> dict[str, float]:
        """The checkpoint's ``best_*`` values (upstream's schema names)."""
        return {"mAP50": self.map50, "mAP50_95": self.map50_95}

    def summary(self) -> str:
        return (f"mAP50 {self.map50:.4f}  mAP50-95 {self.map50_95:.4f}  P {self.precision:.4f}  "
                f"R {self.recall:.4f}")

    def table(self) -> str:
        """A readable table: an ``all`` row, then one row per class with ground truth."""
        width = max([len("all"), len("Class")] + [len(self.names.get(c, str(c))) for c in self.per_class])
        header = ("Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95")
        lines = [f"{header[0]:>{width}}" + "".join(f"{h:>11}" for h in header[1:])]

        def row(name: str, images: int, instances: int, p: float, r: float, m50: float, m: float) -> str:
            return f"{name:>{width}}{images:>11}{instances:>11}" + "".join(
                f"{v:>11.3f}" for v in (p, r, m50, m)
            )

        lines.append(
            row("all", self.n_images, self.n_gt, self.precision, self.recall, self.map50, self.map50_95)
        )
        for c, ap in self.per_class.items():
            name = self.names.get(c, str(c))
            lines.append(row(name, ap.n_images, ap.n_gt, ap.precision, ap.recall, ap.ap50, ap.ap50_95))
        return "\n".join(lines)


class DetectionMetrics:
    """Accumulates ``ImageStats`` (from one rank or gathered from several) and computes metrics.

    Example, sharded over ranks::

        metrics = DetectionMetrics(nc, names)
        for ...:  # this rank's images
            metrics.update(match_image(boxes, scores, cls, gt_boxes, gt_cls, image_id=index))
        gathered = [None] * world_size if rank == 0 else None
        torch.distributed.gather_object(metrics.image_stats, gathered, dst=0)
        if rank == 0:
            total = DetectionMetrics(nc, names)
            total.merge(*gathered)
            result = total.compute()
    """

    def __init__(
        self,
        nc: int,
        names: Mapping[int, str] | Sequence[str] | None = None,
        *,
        iou_thresholds: npt.ArrayLike = IOU_THRESHOLDS,
    ) -> None:
        """Start an empty accumulator for one validation of an ``nc``-class model.

        Args:
            nc: number of classes; class ids must lie in ``0 .. nc-1``.
            names: class id -> name (a dict, or a list indexed by id); missing ids print as numbers.
            iou_thresholds: the thresholds ``match_image`` used; must include 0.50 (for mAP50).

        Raises:
            MetricsInputError: ``nc`` not positive, or thresholds without 0.50.
        """
        if int(nc) != nc or nc < 1:
            raise MetricsInputError(
                f"DetectionMetrics: nc={nc!r} must be a positive integer (the number of classes)"
            )
        self.nc = int(nc)
        items = names.items() if isinstance(names, Mapping) else enumerate(names or ())
        self.names: dict[int, str] = {int(k): str(v) for k, v in items}
        self.iou_thresholds = np.asarray(iou_thresholds, dtype=np.float64).reshape(-1)
        at_50 = np.flatnonzero(np.isclose(self.iou_thresholds, 0.5))
        if at_50.size == 0:
            raise MetricsInputError(
                f"DetectionMetrics: iou_thresholds={self.iou_thresholds.tolist()} lack 0.50, which mAP50 "
                "and precision/recall are measured at; include it (the default is IOU_THRESHOLDS)"
            )
        self._index_50 = int(at_50[0])
        self._stats: list[ImageStats] = []

    def __len__(self) -> int:
        """Number of ``ImageStats`` held (before duplicate image ids are collapsed)."""
        return len(self._stats)

    @property
    def image_stats(self) -> list[ImageStats]:
        """A copy of the held stats: what a rank sends to rank 0."""
        return list(self._stats)

    def reset(self) -> None:
        """Forget everything (start of a new validation)."""
        self._stats.clear()

    def update(self, stats: ImageStats | Iterable[ImageStats]) -> None:
        """Add one image's stats, or many.

        Raises:
            MetricsInputError: a class id outside ``0 .. nc-1``, or a threshold count unlike ours.
            TypeError: something that is not ``ImageStats``.
        """
        batch = [stats] if isinstance(stats, ImageStats) else list(stats)
        for item in batch:
            self._check(item)
        self._stats.extend(batch)

    def merge(self, *parts: DetectionMetrics | Iterable[ImageStats]) -> None:
        """Add other ranks' results: ``DetectionMetrics`` objects or lists of ``ImageStats``.

        The order of ``parts``, and of the stats inside them, does not change ``compute()``.
        """
        for part in parts:
            self.update(part.image_stats if isinstance(part, DetectionMetrics) else part)

    def compute(self) -> MetricsResult:
        """The metrics over everything held. Pure: calling it twice gives the same result."""
        images = _canonical_images(self._stats)
        gt_cls = np.concatenate([s.gt_cls for s in images]) if images else np.zeros(0, np.int64)
        n_gt = np.bincount(gt_cls, minlength=self.nc)
        n_img = np.zeros(self.nc, dtype=np.int64)
        for s in images:
            n_img[np.unique(s.gt_cls)] += 1
        cls, conf, tp, ignore = _detections_by_class(images, len(self.iou_thresholds))
        starts = np.searchsorted(cls, np.arange(self.nc + 1), side="left")
        evaluated = [c for c in range(self.nc) if n_gt[c] > 0]

        ap = np.zeros((self.nc, len(self.iou_thresholds)))
        for c in evaluated:
            ap[c] = _average_precision(tp[starts[c] : starts[c + 1]], int(n_gt[c]), ignore[starts[c] : starts[c + 1]])
        curves = {
            c: (conf[starts[c] : starts[c + 1]], tp[starts[c] : starts[c + 1], self._index_50])
            for c in evaluated
        }
        threshold, prec, rec = _f1_operating_point(curves, {c: int(n_gt[c]) for c in evaluated})

        per_class = {
            c: ClassAP(
                ap50=float(ap[c, self._index_50]),
                ap50_95=float(ap[c].mean()),
                n_gt=int(n_gt[c]),
                n_pred=int(starts[c + 1] - starts[c]),
                precision=float(prec[c]),
                recall=float(rec[c]),
                n_images=int(n_img[c]),
            )
            for c in evaluated
        }
        return MetricsResult(
            map50=_mean([ap[c, self._index_50] for c in evaluated]),
            map50_95=_mean([ap[c].mean() for c in evaluated]),
            precision=_mean([prec[c] for c in evaluated]),
            recall=_mean([rec[c] for c in evaluated]),
            per_class=per_class,
            n_images=len(images),
            n_gt=int(n_gt.sum()),
            n_pred=int(len(cls)),
            conf_threshold=float(threshold),
            names={c: self.names.get(c, str(c)) for c in range(self.nc)},
        )

    def class_curves(self) -> dict[int, tuple[np.ndarray, np.ndarray, int]]:
        """Per class with ground truth: (scores in descending order, TP at IoU 0.50 in that order,
        number of ground-truth boxes): what precision / recall / F1 / PR curves are drawn from."""
        images = _canonical_images(self._stats)
        gt_cls = np.concatenate([s.gt_cls for s in images]) if images else np.zeros(0, np.int64)
        n_gt = np.bincount(gt_cls, minlength=self.nc)
        cls, conf, tp, _ = _detections_by_class(images, len(self.iou_thresholds))
        starts = np.searchsorted(cls, np.arange(self.nc + 1), side="left")
        return {c: (conf[starts[c]:starts[c + 1]], tp[starts[c]:starts[c + 1], self._index_50], int(n_gt[c]))
                for c in range(self.nc) if n_gt[c] > 0}

    def _check(self, item: ImageStats) -> None:
        if not isinstance(item, ImageStats):
            raise TypeError(
                f"DetectionMetrics.update: got {type(item).__name__}; expected ImageStats "
                "(from match_image) or an iterable of them"
            )
        where = f"ImageStats(image_id={item.image_id})"
        if len(item.conf) and item.n_thresholds != len(self.iou_thresholds):
            raise MetricsInputError(
                f"{where} has {item.n_thresholds} IoU thresholds but DetectionMetrics expects "
                f"{len(self.iou_thresholds)}; pass the same iou_thresholds to match_image and DetectionMetrics"
            )
        for label, classes in (("predicted", item.pred_cls), ("ground-truth", item.gt_cls)):
            bad = classes[(classes < 0) | (classes >= self.nc)]
            if bad.size:
                raise MetricsInputError(
                    f"{where} has {label} class {int(bad[0])}, outside 0..{self.nc - 1} (nc={self.nc}); "
                    "the model's nc and the dataset's names must agree"
                )


def _canonical_images(stats: Sequence[ImageStats]) -> list[ImageStats]:
    """Sort by (image_id, content) and collapse repeated ids: makes the result order-free.

    Sorting by id also reproduces COCOeval, which concatenates images in ascending id order;
    that order decides exact score ties between images.
    """
    ordered = sorted(stats, key=lambda s: (s.image_id, s.digest()))
    kept: list[ImageStats] = []
    dropped = 0
    for s in ordered:
        prev = kept[-1] if kept else None
        if prev is not None and s.image_id >= 0 and s.image_id == prev.image_id:
            if not np.array_equal(s.gt_cls, prev.gt_cls):
                raise MetricsInputError(
                    f"image_id {s.image_id} appears twice with different ground truth "
                    f"({len(prev.gt_cls)} vs {len(s.gt_cls)} boxes); ids must be unique across ranks: "
                    "use the image's index in the whole split, not in the rank's shard"
                )
            dropped += 1
            continue
        kept.append(s)
    if dropped:
        log.info("metrics: %d repeated image ids counted once (sampler padding)", dropped)
    return kept


def _detections_by_class(
    images: Sequence[ImageStats], n_thr: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All detections sorted by class, then descending score; ties keep image, then row order.
    Returns class, score, TP ``[n, T]`` and ignored ``[n, T]``."""
    with_dets = [s for s in images if len(s.conf)]
    if not with_dets:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, n_thr), bool), np.zeros((0, n_thr), bool)
    cls = np.concatenate([s.pred_cls for s in with_dets])
    conf = np.concatenate([s.conf for s in with_dets])
    tp = np.concatenate([s.tp for s in with_dets])
    ignore = np.concatenate([s.ignore for s in with_dets if s.ignore is not None])
    order = np.argsort(-conf, kind="stable")  # COCOeval's mergesort on -score: same order, ties kept
    order = order[np.argsort(cls[order], kind="stable")]
    return cls[order], conf[order], tp[order], ignore[order]


def _average_precision(tp: np.ndarray, n_gt: int, ignore: np.ndarray | None = None) -> np.ndarray:
    """COCO 101-point AP of one class: ``tp [n, T]`` in score order -> ``float64 [T]``; a detection
    ``ignore``d at a threshold counts as neither true nor false positive there (COCOeval's dtIg)."""
    n_det = len(tp)
    if n_det == 0:
        return np.zeros(tp.shape[1])
    tp_cum = np.cumsum(tp, axis=0).astype(np.float64)
    fp_cum = np.cumsum(~tp if ignore is None else ~tp & ~ignore, axis=0).astype(np.float64)
    recall = tp_cum / n_gt
    precision = tp_cum / (tp_cum + fp_cum + _EPS)
    envelope = np.maximum.accumulate(precision[::-1], axis=0)[::-1]
    ap = np.empty(tp.shape[1])
    for t in range(tp.shape[1]):
        idx = np.searchsorted(recall[:, t], REC_THRESHOLDS, side="left")
        sampled = np.where(idx < n_det, envelope[np.minimum(idx, n_det - 1), t], 0.0)
        ap[t] = sampled.mean()
    return ap


def _f1_operating_point(
    curves: Mapping[int, tuple[np.ndarray, np.ndarray]], n_gt: Mapping[int, int]
) -> tuple[float, dict[int, float], dict[int, float]]:
    """Pick the score threshold maximizing mean-over-classes F1; per-class P and R there.

    ``curves[c]`` is (scores in descending order, TP at IoU 0.50 in that order). A detection
    counts at threshold ``tau`` when its score is >= ``tau``, so tied scores enter together.
    """
    if not curves:
        return 0.0, {}, {}
    scores = np.unique(np.concatenate([conf for conf, _ in curves.values()]))
    if scores.size == 0:
        return 0.0, dict.fromkeys(curves, 0.0), dict.fromkeys(curves, 0.0)
    if scores.size > _MAX_CONF_CANDIDATES:
        scores = scores[np.round(np.linspace(0, scores.size - 1, _MAX_CONF_CANDIDATES)).astype(np.int64)]
    candidates = scores[::-1].astype(np.float64)  # descending: argmax keeps the highest tied threshold
    prec = np.zeros((len(curves), len(candidates)))
    rec = np.zeros_like(prec)
    for row, (c, (conf, tp50)) in enumerate(curves.items()):
        n_kept = len(conf) - np.searchsorted(conf[::-1], candidates, side="left")
        tp_kept = np.concatenate([[0], np.cumsum(tp50)])[n_kept]
        prec[row] = np.divide(tp_kept, n_kept, out=np.zeros(len(candidates)), where=n_kept > 0)
        rec[row] = tp_kept / n_gt[c]
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(prec), where=(prec + rec) > 0)
    best = int(np.argmax(f1.mean(axis=0)))
    classes = list(curves)
    return (
        float(candidates[best]),
        {c: float(prec[i, best]) for i, c in enumerate(classes)},
        {c: float(rec[i, best]) for i, c in enumerate(classes)},
    )


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0
