"""OCR validation metrics: text detection as ICDAR 2015 and PaddleOCR's ``DetMetric`` score it,
and end to end (a line found and read exactly).

Per picture: a detection lying mostly (over half its area) inside a region not to score is left
out; then ground-truth lines and detections are matched one to one, in order, wherever their
polygon IoU exceeds 0.5. Over the split: precision = matches / detections, recall = matches /
ground-truth lines, H-mean their harmonic mean. End to end, a match counts only when the
recognised text equals the transcription exactly (case and spaces included): ``e2e_hmean`` (the
fitness) from those, and ``word_acc``, the share of matched lines read exactly.

Polygon areas and intersections are OpenCV's (``contourArea``, ``intersectConvexConvex``): exact
for convex polygons, which the detector's boxes always are and labelled quadrilaterals nearly
always are; a concave label is taken by its convex hull.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...optional import require
from .labels import TextBox

IOU_THRESHOLD = 0.5
"""A detection and a labelled line match above this polygon IoU."""
IGNORE_OVERLAP = 0.5
"""A detection with more than this share of its area inside a region not to score is left out."""


def _cv2():  # type: ignore[no-untyped-def]
    return require("cv2", "opencv", "OCR validation's polygon overlaps")


def _convex(points: np.ndarray) -> np.ndarray:
    return _cv2().convexHull(np.asarray(points, dtype=np.float32).reshape(-1, 1, 2)).reshape(-1, 2)


def polygon_area(points: np.ndarray) -> float:
    return float(_cv2().contourArea(_convex(points)))


def intersection_area(a: np.ndarray, b: np.ndarray) -> float:
    area, _ = _cv2().intersectConvexConvex(_convex(a), _convex(b))
    return max(float(area), 0.0)


def polygon_iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = intersection_area(a, b)
    union = polygon_area(a) + polygon_area(b) - inter
    return inter / union if union > 0 else 0.0


@dataclass(frozen=True)
class PictureCounts:
    """One picture's tallies: labelled lines (scored), detections kept, matches, matches read exactly."""

    lines: int
    detections: int
    matches: int
    read: int


def score_picture(labels: Sequence[TextBox], polygons: Sequence[np.ndarray], texts: Sequence[str]) -> PictureCounts:
    """Match one picture's detections (``polygons`` with their ``texts``) to its labelled lines."""
    scored = [box for box in labels if not box.ignore]
    ignored = [box for box in labels if box.ignore]
    kept = []
    for polygon, text in zip(polygons, texts, strict=True):
        area = polygon_area(polygon)
        inside = max((intersection_area(polygon, box.points) for box in ignored), default=0.0)
        if area > 0 and inside / area > IGNORE_OVERLAP:
            continue
        kept.append((polygon, text))
    taken = [False] * len(kept)
    matches = read = 0
    for box in scored:
        for j, (polygon, text) in enumerate(kept):
            if not taken[j] and polygon_iou(box.points, polygon) > IOU_THRESHOLD:
                taken[j] = True
                matches += 1
                read += int(text == box.text)
                break
    return PictureCounts(len(scored), len(kept), matches, read)


def _hmean(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


@dataclass(frozen=True)
class OcrResult:
    """One validation's outcome (the ``TaskMetrics`` of the ocr task)."""

    lines: int
    detections: int
    matches: int
    read: int
    n_images: int

    @property
    def precision(self) -> float:
        return self.matches / self.detections if self.detections else 0.0

    @property
    def recall(self) -> float:
        return self.matches / self.lines if self.lines else 0.0

    @property
    def hmean(self) -> float:
        return _hmean(self.precision, self.recall)

    @property
    def e2e_hmean(self) -> float:
        return _hmean(self.read / self.detections if self.detections else 0.0,
                      self.read / self.lines if self.lines else 0.0)

    @property
    def word_acc(self) -> float:
        return self.read / self.matches if self.matches else 0.0

    @property
    def fitness(self) -> float:
        return self.e2e_hmean

    def as_dict(self) -> dict[str, float]:
        return {"metrics/precision": self.precision, "metrics/recall": self.recall, "metrics/hmean": self.hmean,
                "metrics/word_acc": self.word_acc, "metrics/e2e_hmean": self.e2e_hmean}

    def best_fields(self) -> dict[str, float]:
        return {"e2e_hmean": self.e2e_hmean, "hmean": self.hmean}

    def summary(self) -> str:
        return (f"detection P {self.precision:.3f} R {self.recall:.3f} H-mean {self.hmean:.3f}  read exactly "
                f"{self.word_acc:.1%} of the found lines  end-to-end H-mean {self.e2e_hmean:.3f}  ({self.lines} "
                f"lines, {self.detections} detections in {self.n_images} images)")

    def table(self) -> str:
        head = f"{'Lines':>8}{'Found':>8}{'Dets':>8}{'P':>8}{'R':>8}{'H-mean':>8}{'Read':>8}{'E2E-H':>8}"
        row = (f"{self.lines:>8}{self.matches:>8}{self.detections:>8}{self.precision:>8.3f}{self.recall:>8.3f}"
               f"{self.hmean:>8.3f}{self.word_acc:>8.3f}{self.e2e_hmean:>8.3f}")
        return f"{head}\n{row}"


def total(sums: np.ndarray, n_images: int) -> OcrResult:
    """The result of summed tallies ``int64 [4]``: lines, detections, matches, read (over ranks)."""
    lines, detections, matches, read = (int(v) for v in np.asarray(sums, dtype=np.int64).reshape(4))
    return OcrResult(lines, detections, matches, read, n_images)
