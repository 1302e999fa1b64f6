"""Our mAP against pycocotools' COCOeval on the same ground truth and predictions (issue 3 point 6).

Random but seeded scenes: several classes (one never in the ground truth), images without ground
truth, overlapping boxes, predictions made of jittered ground-truth copies, duplicates, wrong
classes and false positives, with random scores. Fewer than 100 detections per image and class,
so COCO's maxDets=100 cannot make the numbers differ; a separate case crosses 100 and compares
with ``match_image(max_det=100)``. The acceptance bound is 1e-3; the implementations agree to
float rounding, so 1e-9 is asserted.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from libreyolo_models.tasks.detect.matching import match_image
from libreyolo_models.tasks.detect.metrics import DetectionMetrics

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

TOL = 1e-9  # acceptance asks for 1e-3


def _boxes(rng, n, size=(640.0, 480.0)):
    wh = rng.uniform(8, 160, (n, 2))
    xy = rng.uniform(0, 1, (n, 2)) * (np.array(size) - wh)
    return np.concatenate([xy, xy + wh], axis=1)


def _scene(rng, nc):
    """One image: (gt boxes, gt classes, pred boxes, pred scores, pred classes)."""
    n_gt = 0 if rng.random() < 0.2 else int(rng.integers(1, 9))
    gt = _boxes(rng, n_gt)
    if n_gt >= 2:  # overlapping objects: shift copies of some boxes by a fraction of their size
        k = int(rng.integers(1, n_gt))
        size = gt[:k, 2:] - gt[:k, :2]
        gt[n_gt - k :] = gt[:k] + np.tile(size * rng.uniform(-0.4, 0.4, (k, 2)), 2)
    gcls = rng.integers(0, nc - 1, n_gt)  # class nc-1 never has ground truth
    preds, pcls = [], []
    for box, c in zip(gt, gcls):
        size = np.tile(box[2:] - box[:2], 2)
        for _ in range(int(rng.choice([0, 1, 1, 1, 2, 3]))):  # misses, hits, duplicates
            preds.append(box + rng.normal(0, 0.08, 4) * size)
            pcls.append(c if rng.random() < 0.9 else int(rng.integers(0, nc)))
    n_fp = int(rng.integers(0, 6))
    preds.extend(_boxes(rng, n_fp))
    pcls.extend(rng.integers(0, nc, n_fp).tolist())
    pred = np.asarray(preds, dtype=np.float64).reshape(-1, 4)
    scores = rng.random(len(pred)).astype(np.float32)
    return gt, gcls, pred, scores, np.asarray(pcls, dtype=np.int64)


def _xywh(box):
    x1, y1, x2, y2 = (float(v) for v in box)
    return [x1, y1, x2 - x1, y2 - y1]


def _cocoeval(scenes, nc):
    """Run COCOeval in memory; return (stats[0] mAP50-95, stats[1] mAP50, per-class AP50-95)."""
    images, anns, dets = [], [], []
    for i, (gt, gcls, pred, scores, pcls) in enumerate(scenes):
        images.append({"id": i + 1, "width": 640, "height": 480})
        for box, c in zip(gt, gcls):
            xywh = _xywh(box)
            # annotation ids start at 1: COCOeval reads id 0 as "unmatched"
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": xywh,
                    "area": xywh[2] * xywh[3],
                    "iscrowd": 0,
                }
            )
        for box, s, c in zip(pred, scores, pcls):
            dets.append({"image_id": i + 1, "category_id": int(c) + 1, "bbox": _xywh(box), "score": float(s)})
    gt_api = COCO()
    gt_api.dataset = {
        "images": images,
        "annotations": anns,
        "categories": [{"id": c + 1, "name": f"c{c}"} for c in range(nc)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt_api.createIndex()
        evaluator = COCOeval(gt_api, gt_api.loadRes(dets), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    precision = evaluator.eval["precision"][:, :, :, 0, -1]  # [T, R, K] area "all", maxDets 100
    per_class = {k: float(precision[:, :, k].mean()) for k in range(nc) if (precision[:, :, k] > -1).all()}
    return float(evaluator.stats[0]), float(evaluator.stats[1]), per_class


def _ours(scenes, nc, max_det=None):
    metrics = DetectionMetrics(nc)
    for i, (gt, gcls, pred, scores, pcls) in enumerate(scenes):
        metrics.update(match_image(pred, scores, pcls, gt, gcls, image_id=i, max_det=max_det))
    return metrics.compute()


@pytest.mark.parametrize("seed", range(6))
def test_map_matches_pycocotools_on_random_scenes(seed):
    rng = np.random.default_rng(seed)
    nc = 5
    scenes = [_scene(rng, nc) for _ in range(30)]
    assert any(len(s[0]) == 0 for s in scenes), "the seed should give a background image"
    map50_95, map50, per_class = _cocoeval(scenes, nc)
    ours = _ours(scenes, nc)
    assert 0.05 < ours.map50_95 < 0.95  # neither trivial nor degenerate
    assert ours.map50_95 == pytest.approx(map50_95, abs=TOL)
    assert ours.map50 == pytest.approx(map50, abs=TOL)
    assert set(ours.per_class) == set(per_class)  # the never-labelled class is left out by both
    for k, ap in per_class.items():
        assert ours.per_class[k].ap50_95 == pytest.approx(ap, abs=TOL), f"class {k}"


def test_tied_scores_break_in_image_order_as_pycocotools():
    rng = np.random.default_rng(42)
    nc = 3
    scenes = []
    for _ in range(25):
        gt, gcls, pred, _, pcls = _scene(rng, nc)
        scores = (rng.integers(1, 5, len(pred)) / 4).astype(np.float32)  # four distinct scores
        scenes.append((gt, gcls, pred, scores, pcls))
    map50_95, map50, _ = _cocoeval(scenes, nc)
    ours = _ours(scenes, nc)
    assert (ours.map50_95, ours.map50) == pytest.approx((map50_95, map50), abs=TOL)


def test_equal_iou_tie_resolves_like_pycocotools():
    # the first detection has IoU exactly 0.5 with both boxes; COCOeval gives it the later one
    gt = np.array([[0, 0, 10, 5], [0, 5, 10, 10]], float)
    pred = np.array([[0, 0, 10, 10], [0, 5, 10, 10]], float)
    scene = (gt, np.array([0, 0]), pred, np.array([0.9, 0.8], np.float32), np.array([0, 0]))
    map50_95, map50, _ = _cocoeval([scene], 1)
    ours = _ours([scene], 1)
    assert (ours.map50_95, ours.map50) == pytest.approx((map50_95, map50), abs=TOL)


def test_max_det_100_reproduces_coco_cap_past_100_detections_per_class():
    rng = np.random.default_rng(7)
    scenes = []
    for _ in range(3):
        gt = _boxes(rng, 6)
        gcls = np.zeros(6, np.int64)
        pred = np.concatenate([gt + rng.normal(0, 3, gt.shape), _boxes(rng, 140)])
        scores = rng.random(len(pred)).astype(np.float32)
        scores[-20:] = rng.uniform(0.95, 1.0, 20)  # high-scored junk pushes some true hits past 100
        scenes.append((gt, gcls, pred, scores, np.zeros(len(pred), np.int64)))
    map50_95, map50, _ = _cocoeval(scenes, 1)
    capped = _ours(scenes, 1, max_det=100)
    assert (capped.map50_95, capped.map50) == pytest.approx((map50_95, map50), abs=TOL)
    uncapped = _ours(scenes, 1)
    assert uncapped.n_pred == 3 * 146 and capped.n_pred == 300
    assert abs(uncapped.map50_95 - map50_95) > 1e-3  # the cap matters on this data
