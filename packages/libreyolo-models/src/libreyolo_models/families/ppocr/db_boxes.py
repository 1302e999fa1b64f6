"""DB post-processing: a text probability map -> scored, expanded quadrilaterals (eager, OpenCV).

Follows the published inference recipe (RapidOCR's defaults for PP-OCRv4): threshold at ``thresh``,
dilate by a 2x2 square, take each outer contour's minimum-area rectangle, score it by the mean
probability inside it, drop those under ``box_thresh``, then grow the rectangle by the DB offset
``area * unclip_ratio / perimeter`` on every side. Offsetting a rectangle and taking the
minimum-area rectangle of the rounded result (upstream's polygon-clipping path) gives exactly the
rectangle grown by the offset, so no polygon library is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...optional import require


@dataclass(frozen=True)
class DBOptions:
    thresh: float = 0.3
    box_thresh: float = 0.5
    unclip_ratio: float = 1.6
    max_candidates: int = 1000
    min_size: float = 3.0


def _cv2():  # type: ignore[no-untyped-def]
    return require("cv2", "opencv", "PP-OCR's text box extraction (contours, minimum-area rectangles)")


def ordered_corners(rect: tuple) -> np.ndarray:
    """A rotated rectangle's corners as ``float32 [4, 2]``: top-left, top-right, bottom-right, bottom-left."""
    cv2 = _cv2()
    pts = sorted(cv2.boxPoints(rect).tolist(), key=lambda p: p[0])
    left = sorted(pts[:2], key=lambda p: p[1])
    right = sorted(pts[2:], key=lambda p: p[1])
    return np.array([left[0], right[0], right[1], left[1]], dtype=np.float32)


def box_score(prob: np.ndarray, corners: np.ndarray) -> float:
    """Mean probability inside the quadrilateral (upstream's "fast" score)."""
    cv2 = _cv2()
    h, w = prob.shape
    x0, x1 = int(np.clip(np.floor(corners[:, 0].min()), 0, w - 1)), int(np.clip(np.ceil(corners[:, 0].max()), 0, w - 1))
    y0, y1 = int(np.clip(np.floor(corners[:, 1].min()), 0, h - 1)), int(np.clip(np.ceil(corners[:, 1].max()), 0, h - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), dtype=np.uint8)
    shifted = (corners - np.array([x0, y0], dtype=np.float32)).astype(np.int32)
    cv2.fillPoly(mask, shifted.reshape(1, -1, 2), 1)
    return float(cv2.mean(prob[y0:y1 + 1, x0:x1 + 1], mask)[0])


def text_boxes(prob: np.ndarray, scale: tuple[float, float], size: tuple[int, int],
               opts: DBOptions) -> tuple[np.ndarray, np.ndarray]:
    """``prob`` ``float32 [h, w]`` -> corners ``float32 [N, 4, 2]`` in the picture's pixels (``scale``:
    picture / network, x then y; ``size``: the picture's ``(H, W)``) and their scores ``[N]``."""
    cv2 = _cv2()
    bitmap = cv2.dilate((prob > opts.thresh).astype(np.uint8), np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes, scores = [], []
    for contour in contours[:opts.max_candidates]:
        rect = cv2.minAreaRect(contour)
        if min(rect[1]) < opts.min_size:
            continue
        score = box_score(prob, ordered_corners(rect))
        if score < opts.box_thresh:
            continue
        w, h = rect[1]
        grow = w * h * opts.unclip_ratio / (2.0 * (w + h))
        rect = (rect[0], (w + 2 * grow, h + 2 * grow), rect[2])
        if min(rect[1]) < opts.min_size + 2:
            continue
        corners = ordered_corners(rect) * np.array(scale, dtype=np.float32)
        corners[:, 0] = np.clip(np.round(corners[:, 0]), 0, size[1])
        corners[:, 1] = np.clip(np.round(corners[:, 1]), 0, size[0])
        boxes.append(corners)
        scores.append(score)
    if not boxes:
        return np.zeros((0, 4, 2), np.float32), np.zeros((0,), np.float32)
    return np.stack(boxes), np.asarray(scores, dtype=np.float32)


def reading_order(boxes: np.ndarray) -> np.ndarray:
    """Indices top to bottom, then left to right among boxes whose tops are within 10 px."""
    order = sorted(range(len(boxes)), key=lambda i: (float(boxes[i][0, 1]), float(boxes[i][0, 0])))
    for _ in range(len(order)):
        swapped = False
        for j in range(len(order) - 1):
            a, b = boxes[order[j]], boxes[order[j + 1]]
            if abs(float(b[0, 1] - a[0, 1])) < 10 and b[0, 0] < a[0, 0]:
                order[j], order[j + 1] = order[j + 1], order[j]
                swapped = True
        if not swapped:
            break
    return np.asarray(order, dtype=np.int64)


def crop_line(image: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """The quadrilateral warped upright (``uint8 [h, w, 3]``); a tall crop is turned a quarter."""
    cv2 = _cv2()
    w = int(max(np.linalg.norm(corners[0] - corners[1]), np.linalg.norm(corners[2] - corners[3])))
    h = int(max(np.linalg.norm(corners[0] - corners[3]), np.linalg.norm(corners[1] - corners[2])))
    w, h = max(w, 1), max(h, 1)
    target = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(corners.astype(np.float32), target)
    crop = cv2.warpPerspective(image, matrix, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    return np.rot90(crop) if h / w >= 1.5 else crop
