"""Mask mAP and OKS mAP against pycocotools' COCOeval (``segm`` and ``keypoints``), issue 41.

The same ground truth and predictions go to both: our ``match_similarity`` over mask IoU or OKS,
then ``DetectionMetrics``; COCOeval over RLE masks (pycocotools encodes them) or keypoint lists.
Hand-made cases pin the rules (an IoU tie, an ignored person, a detection past maxDets); random
seeded scenes (several classes, background images, duplicates, misses, false positives) check
the whole. The acceptance bound is 1e-6; the implementations agree to float rounding.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

from libreyolo_models.tasks.detect.metrics import DetectionMetrics
from libreyolo_models.tasks.instances.matching import match_similarity
from libreyolo_models.tasks.pose.scoring import oks_matrix
from libreyolo_models.tasks.segment.scoring import mask_iou

pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

TOL = 1e-6
H, W = 48, 64


def _evaluate(images, anns, dets, nc, kind, sigmas=None):
    gt = COCO()
    cats = [{"id": c + 1, "name": f"c{c}"} for c in range(nc)]
    gt.dataset = {"images": images, "annotations": anns, "categories": cats}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(dets) if dets else COCO(), kind)
        if sigmas is not None:
            evaluator.params.kpt_oks_sigmas = np.asarray(sigmas)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return float(evaluator.stats[0]), float(evaluator.stats[1])


# ----------------------------------------------------------------------------------------- masks
def _blob(rng, h=H, w=W):
    """A random mask: an ellipse, sometimes with a hole or a second part."""
    yy, xx = np.mgrid[:h, :w] + 0.5
    cy, cx = rng.uniform(8, h - 8), rng.uniform(8, w - 8)
    ry, rx = rng.uniform(3, 14), rng.uniform(3, 18)
    m = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
    if rng.random() < 0.3:
        m &= ((yy - cy) / (ry / 3)) ** 2 + ((xx - cx) / (rx / 3)) ** 2 > 1
    if rng.random() < 0.2:
        m |= (np.abs(yy - rng.uniform(0, h)) < 2) & (np.abs(xx - rng.uniform(0, w)) < 4)
    return m


def _jitter(rng, m):
    shift = rng.integers(-2, 3, 2)
    out = np.roll(m, tuple(int(s) for s in shift), axis=(0, 1))
    if rng.random() < 0.3:
        out = out & (rng.random(m.shape) > 0.1)
    return out


def _mask_scene(rng, nc):
    n = 0 if rng.random() < 0.2 else int(rng.integers(1, 6))
    gts = [_blob(rng) for _ in range(n)]
    gcls = rng.integers(0, nc - 1, n)
    preds, pcls = [], []
    for m, c in zip(gts, gcls):
        for _ in range(int(rng.choice([0, 1, 1, 2]))):
            preds.append(_jitter(rng, m))
            pcls.append(int(c) if rng.random() < 0.9 else int(rng.integers(0, nc)))
    for _ in range(int(rng.integers(0, 4))):
        preds.append(_blob(rng))
        pcls.append(int(rng.integers(0, nc)))
    scores = rng.random(len(preds)).astype(np.float32)
    return gts, gcls, preds, scores, np.asarray(pcls, np.int64)


def _rle(m):
    rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode()
    return rle


def _coco_masks(scenes, nc):
    images, anns, dets = [], [], []
    for i, (gts, gcls, preds, scores, pcls) in enumerate(scenes):
        images.append({"id": i + 1, "width": W, "height": H})
        for m, c in zip(gts, gcls):
            rle = _rle(m)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1, "segmentation": rle,
                         "area": float(m.sum()), "bbox": list(mask_utils.toBbox(rle)), "iscrowd": 0})
        for m, s, c in zip(preds, scores, pcls):
            dets.append({"image_id": i + 1, "category_id": int(c) + 1, "segmentation": _rle(m), "score": float(s)})
    return _evaluate(images, anns, dets, nc, "segm")


def _ours_masks(scenes, nc):
    metrics = DetectionMetrics(nc)
    for i, (gts, gcls, preds, scores, pcls) in enumerate(scenes):
        p = torch.from_numpy(np.array(preds, bool).reshape(len(preds), H, W))
        g = torch.from_numpy(np.array(gts, bool).reshape(len(gts), H, W))
        sim = mask_iou(p, g) if len(preds) and len(gts) else np.zeros((len(preds), len(gts)))
        metrics.update(match_similarity(sim, scores, pcls, gcls, max_det=100, image_id=i))
    result = metrics.compute()
    return result.map50_95, result.map50


@pytest.mark.parametrize("seed", range(4))
def test_mask_map_matches_pycocotools_segm_on_random_scenes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nc = 4
    scenes = [_mask_scene(rng, nc) for _ in range(20)]
    expected = _coco_masks(scenes, nc)
    ours = _ours_masks(scenes, nc)
    assert 0.05 < ours[0] < 0.95
    assert ours == pytest.approx(expected, abs=TOL)


def test_mask_iou_ties_and_duplicates_resolve_like_pycocotools() -> None:
    """Two ground truths a prediction overlaps equally (the later wins), a duplicate that becomes a
    false positive, and a detection of a class without ground truth."""
    left = np.zeros((H, W), bool)
    left[10:30, 10:20] = True
    right = np.zeros((H, W), bool)
    right[10:30, 20:30] = True
    both = left | right
    scene = ([left, right], np.array([0, 0]), [both, right, both], np.array([0.9, 0.8, 0.7], np.float32),
             np.array([0, 0, 1]))
    assert _ours_masks([scene], 2) == pytest.approx(_coco_masks([scene], 2), abs=TOL)


def test_mask_map_caps_at_100_detections_per_class_like_pycocotools() -> None:
    rng = np.random.default_rng(3)
    gts = [_blob(rng) for _ in range(3)]
    preds = [_jitter(rng, m) for m in gts] + [_blob(rng) for _ in range(110)]
    scores = rng.random(len(preds)).astype(np.float32)
    scores[3:23] = rng.uniform(0.95, 1.0, 20)  # high-scored junk pushes true hits past 100
    scene = (gts, np.zeros(3, np.int64), preds, scores, np.zeros(len(preds), np.int64))
    assert _ours_masks([scene], 1) == pytest.approx(_coco_masks([scene], 1), abs=TOL)


# ----------------------------------------------------------------------------------------- keypoints
K = 5
SIGMAS = np.array([0.05, 0.08, 0.08, 0.1, 0.1])


def _person(rng):
    """``(keypoints [K, 3] pixels + visibility, bbox xywh, area)``; sometimes nothing labelled."""
    x, y = rng.uniform(0, 200), rng.uniform(0, 150)
    w, h = rng.uniform(20, 80), rng.uniform(20, 80)
    kp = np.column_stack((x + rng.uniform(0, w, K), y + rng.uniform(0, h, K), rng.choice([0, 1, 2], K, p=[.2, .2, .6])))
    if rng.random() < 0.15:
        kp[:, 2] = 0
    kp[kp[:, 2] == 0, :2] = 0
    return kp, [x, y, w, h], float(w * h * rng.uniform(0.4, 0.9))


def _pose_scene(rng, nc):
    n = 0 if rng.random() < 0.2 else int(rng.integers(1, 6))
    people = [_person(rng) for _ in range(n)]
    gcls = rng.integers(0, nc, n)
    preds, pcls = [], []
    for (kp, box, _), c in zip(people, gcls):
        for _ in range(int(rng.choice([0, 1, 1, 2]))):
            centre = np.array([box[0] + box[2] / 2, box[1] + box[3] / 2])
            guess = np.where(kp[:, 2:] > 0, kp[:, :2], centre) + rng.normal(0, rng.uniform(1, 8), (K, 2))
            preds.append(guess)
            pcls.append(int(c) if rng.random() < 0.9 else int(rng.integers(0, nc)))
    for _ in range(int(rng.integers(0, 3))):
        preds.append(rng.uniform(0, 250, (K, 2)))
        pcls.append(int(rng.integers(0, nc)))
    scores = rng.random(len(preds)).astype(np.float32)
    return people, gcls, preds, scores, np.asarray(pcls, np.int64)


def _coco_pose(scenes, nc):
    images, anns, dets = [], [], []
    for i, (people, gcls, preds, scores, pcls) in enumerate(scenes):
        images.append({"id": i + 1, "width": 320, "height": 240})
        for (kp, box, area), c in zip(people, gcls):
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1,
                         "keypoints": kp.reshape(-1).tolist(), "num_keypoints": int((kp[:, 2] > 0).sum()),
                         "bbox": box, "area": area, "iscrowd": 0})
        for p, s, c in zip(preds, scores, pcls):
            dets.append({"image_id": i + 1, "category_id": int(c) + 1, "score": float(s),
                         "keypoints": np.column_stack((p, np.ones(K))).reshape(-1).tolist()})
    return _evaluate(images, anns, dets, nc, "keypoints", SIGMAS)


def _ours_pose(scenes, nc):
    metrics = DetectionMetrics(nc)
    for i, (people, gcls, preds, scores, pcls) in enumerate(scenes):
        gt = np.array([p[0] for p in people]).reshape(-1, K, 3)
        boxes = np.array([[b[0], b[1], b[0] + b[2], b[1] + b[3]] for _, b, _ in people]).reshape(-1, 4)
        areas = np.array([a for _, _, a in people])
        sim = oks_matrix(np.array(preds).reshape(-1, K, 2), gt, boxes, areas, SIGMAS)
        ignore = ~(gt[..., 2] > 0).any(1)
        metrics.update(match_similarity(sim, scores, pcls, gcls, gt_ignore=ignore, max_det=20, image_id=i))
    result = metrics.compute()
    return result.map50_95, result.map50


@pytest.mark.parametrize("seed", range(4))
def test_oks_map_matches_pycocotools_keypoints_on_random_scenes(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    nc = 2
    scenes = [_pose_scene(rng, nc) for _ in range(25)]
    assert any(not (p[0][:, 2] > 0).any() for s in scenes for p in s[0]), "the seed should give an ignored person"
    expected = _coco_pose(scenes, nc)
    ours = _ours_pose(scenes, nc)
    assert 0.05 < ours[0] < 0.95
    assert ours == pytest.approx(expected, abs=TOL)


def test_a_detection_on_an_unlabelled_person_is_ignored_like_pycocotools() -> None:
    """The unlabelled person absorbs the detection near it (neither true nor false positive) only
    when no labelled person is close enough; a far detection stays a false positive."""
    labelled = (np.column_stack((np.linspace(10, 50, K), np.linspace(10, 50, K), np.full(K, 2))), [10, 10, 40, 40], 900.0)
    empty = (np.zeros((K, 3)), [100, 100, 40, 40], 900.0)
    preds = [labelled[0][:, :2] + 1, np.full((K, 2), 120.0), np.full((K, 2), 300.0)]
    scene = ([labelled, empty], np.array([0, 0]), preds, np.array([0.5, 0.9, 0.7], np.float32), np.zeros(3, np.int64))
    assert _ours_pose([scene], 1) == pytest.approx(_coco_pose([scene], 1), abs=TOL)


def test_keypoints_cap_at_20_detections_per_class_like_pycocotools() -> None:
    rng = np.random.default_rng(7)
    people = [_person(rng) for _ in range(3)]
    for p in people:
        p[0][:, 2] = 2
    preds = [p[0][:, :2] + rng.normal(0, 2, (K, 2)) for p in people] + [rng.uniform(0, 250, (K, 2)) for _ in range(30)]
    scores = rng.random(len(preds)).astype(np.float32)
    scores[3:] = rng.uniform(0.5, 1.0, 30)
    scene = (people, np.zeros(3, np.int64), preds, scores, np.zeros(len(preds), np.int64))
    assert _ours_pose([scene], 1) == pytest.approx(_coco_pose([scene], 1), abs=TOL)
