"""Validation artefacts: the confusion matrix (known counts), curves that agree with the
metrics, plots that decode, and predictions.json that pycocotools loads and scores like us."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO9
from libreyolo_models.tasks.curves import THRESHOLDS, all_class_curves
from libreyolo_models.tasks.detect.confusion import ConfusionMatrix
from libreyolo_models.tasks.detect.matching import match_image
from libreyolo_models.tasks.detect.metrics import DetectionMetrics
from libreyolo_models.tasks.plots import plot_batch, plot_confusion, plot_curves, plot_labels


def _decodes(path: Path) -> tuple[int, int]:
    """The image at ``path`` opens, is not blank, and has a size."""
    with Image.open(path) as im:
        im.load()
        arr = np.asarray(im.convert("L"))
    assert arr.size > 0 and arr.std() > 0, f"{path.name} is empty or blank"
    return im.size


def test_confusion_matrix_counts_matches_misses_false_alarms_and_class_mixups() -> None:
    cm = ConfusionMatrix(nc=2, conf=0.25, iou=0.45)
    gt = torch.tensor([[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]], dtype=torch.float32)
    gt_cls = torch.tensor([0, 1, 1])
    det = torch.tensor([[0, 0, 10, 10, 0.9, 0],      # right class on gt 0
                        [20, 20, 30, 31, 0.8, 0],    # gt 1 (class 1) predicted as class 0
                        [80, 80, 90, 90, 0.7, 1],    # nothing there: a false alarm of class 1
                        [50, 50, 60, 60, 0.1, 1]])   # below conf: ignored, so gt 2 is missed
    cm.update(det, gt, gt_cls)
    bg = 2
    expected = np.zeros((3, 3), np.int64)
    expected[0, 0] = 1   # true 0 -> predicted 0
    expected[1, 0] = 1   # true 1 -> predicted 0
    expected[1, bg] = 1  # true 1 missed
    expected[bg, 1] = 1  # background predicted as 1
    np.testing.assert_array_equal(cm.matrix, expected)
    np.testing.assert_allclose(cm.normalized()[1], [0.5, 0.0, 0.5])
    other = ConfusionMatrix(nc=2)
    other.update(det[:1], gt[:1], gt_cls[:1])
    cm.merge(other.matrix)
    assert cm.matrix[0, 0] == 2


def test_one_detection_matches_at_most_one_ground_truth_box() -> None:
    cm = ConfusionMatrix(nc=1)
    gt = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11]], dtype=torch.float32)
    cm.update(torch.tensor([[0.5, 0.5, 10.5, 10.5, 0.9, 0]]), gt, torch.tensor([0, 0]))
    np.testing.assert_array_equal(cm.matrix, [[1, 1], [0, 0]])


def _random_stats(seed: int, nc: int = 3, images: int = 12) -> DetectionMetrics:
    rng = np.random.default_rng(seed)
    metrics = DetectionMetrics(nc)
    for i in range(images):
        n_gt = int(rng.integers(1, 5))
        xy = rng.uniform(0, 80, (n_gt, 2))
        gt = np.concatenate([xy, xy + rng.uniform(10, 30, (n_gt, 2))], 1)
        gt_cls = rng.integers(0, nc, n_gt)
        jitter = rng.normal(0, 3, gt.shape)
        extra = rng.uniform(0, 100, (2, 2))
        boxes = np.concatenate([gt + jitter, np.concatenate([extra, extra + 15], 1)])
        cls = np.concatenate([np.where(rng.random(n_gt) < 0.8, gt_cls, (gt_cls + 1) % nc), rng.integers(0, nc, 2)])
        scores = rng.random(len(boxes))
        metrics.update(match_image(torch.tensor(boxes), torch.tensor(scores), torch.tensor(cls), torch.tensor(gt),
                                   torch.tensor(gt_cls), image_id=i))
    return metrics


def test_curves_agree_with_the_reported_ap50_precision_and_recall() -> None:
    metrics = _random_stats(0)
    result = metrics.compute()
    curves = all_class_curves(metrics.class_curves())
    assert set(curves) == set(result.per_class)
    for c, cc in curves.items():
        assert cc.ap50 == pytest.approx(result.per_class[c].ap50, abs=1e-9)
        assert (np.diff(cc.recall) <= 1e-12).all()  # recall never grows with the threshold
        assert cc.f1.max() <= 1 and cc.precision.min() >= 0
    # At the reported operating point the sampled curves bracket the reported P and R.
    t = result.conf_threshold
    k = int(np.searchsorted(THRESHOLDS, t, side="right")) - 1
    mean_r = np.mean([cc.recall[k] for cc in curves.values()])
    assert mean_r >= result.recall - 1e-9


def test_plots_write_images_that_decode(tmp_path) -> None:
    names = {0: "circle", 1: "square", 2: "triangle"}
    metrics = _random_stats(1)
    cm = ConfusionMatrix(nc=3)
    cm.matrix[:] = np.arange(16).reshape(4, 4)
    counts = plot_confusion(cm.matrix, names, tmp_path / "cm.png", normalize=False)
    normed = plot_confusion(cm.matrix, names, tmp_path / "cmn.png", normalize=True)
    curves = plot_curves(all_class_curves(metrics.class_curves()), names, tmp_path)
    labels = plot_labels([np.array([[0, 0.5, 0.5, 0.2, 0.3], [2, 0.1, 0.8, 0.1, 0.1]], np.float32),
                          np.zeros((0, 5), np.float32)], names, tmp_path / "labels.jpg")
    images = torch.rand(3, 3, 64, 64)
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.5, 0.5], [2, 0, 0.3, 0.3, 0.2, 0.2]])
    batch = plot_batch(images, targets, names, tmp_path / "batch.jpg")
    for path in [counts, normed, *curves, labels, batch]:
        assert path.is_file()
        w, h = _decodes(path)
        assert w > 50 and h > 50
    assert sorted(p.name for p in curves) == ["F1_curve.png", "PR_curve.png", "P_curve.png", "R_curve.png"]
    assert _decodes(batch) == (128, 128)  # 3 tiles of 64 px on a 2 x 2 grid


@pytest.fixture(scope="module")
def confident_model() -> LibreYOLO9:
    """An untrained model lifted to score every class around 0.5: many boxes for the metrics."""
    from libreyolo_models.data.shapes import CLASS_NAMES

    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=len(CLASS_NAMES), names=list(CLASS_NAMES), imgsz=64)
    with torch.no_grad():
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.linspace(0.2, -0.2, len(CLASS_NAMES)))
    return m


def test_val_writes_plots_and_predictions_json(confident_model, mini_shapes, tmp_path) -> None:
    result = confident_model.val(data=str(mini_shapes), imgsz=64, batch=4, workers=0, max_det=100, plots=True,
                                 save_json=True, project=str(tmp_path), name="v", verbose=False)
    run = tmp_path / "v"
    for name in ("confusion_matrix.png", "confusion_matrix_normalized.png", "PR_curve.png", "P_curve.png",
                 "R_curve.png", "F1_curve.png"):
        _decodes(run / name)
    rows = json.loads((run / "predictions.json").read_text())
    assert len(rows) == result.n_pred > 0
    assert set(rows[0]) == {"image_id", "category_id", "bbox", "score"}
    assert {r["image_id"] for r in rows} <= {f"val_{i:04d}" for i in range(8)}


def _oracle_forward(current: list, nc: int, imgsz: int):
    """Raw YOLOv9-shaped outputs ``[B, 4 + nc, A]`` built from the current batch's ground truth:
    each true box slightly shifted with a score, plus a wrong-class copy and a stray box, so the
    metrics have true positives, mistakes and a ranking to score."""
    def forward(images: torch.Tensor) -> torch.Tensor:
        targets = current[0].targets
        gen = torch.Generator().manual_seed(len(targets))
        b = images.shape[0]
        per_image = [targets[targets[:, 0] == i] for i in range(b)]
        anchors = 3 * max(len(t) for t in per_image) + 1
        raw = torch.zeros(b, 4 + nc, anchors)
        for i, rows in enumerate(per_image):
            cx, cy, w, h = (rows[:, 2:6] * imgsz).T
            xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) + torch.randn(4, len(rows),
                                                                                            generator=gen)
            n = len(rows)
            raw[i, :4, :n] = xyxy
            raw[i, 4 + rows[:, 1].long(), torch.arange(n)] = 0.5 + 0.5 * torch.rand(n, generator=gen)
            raw[i, :4, n:2 * n] = xyxy + 20
            raw[i, 4 + (rows[:, 1].long() + 1) % nc, torch.arange(n, 2 * n)] = 0.6 * torch.rand(n, generator=gen)
            raw[i, :4, -1] = torch.tensor([1.0, 1.0, 9.0, 9.0])
            raw[i, 4, -1] = 0.3
        return raw
    return forward


def test_predictions_json_loads_in_pycocotools_and_scores_like_our_metrics(confident_model, mini_shapes,
                                                                            tmp_path) -> None:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from libreyolo_models.tasks.detect.artefacts import DetectArtefacts
    from libreyolo_models.tasks.detect.task import DetectOptions
    from libreyolo_models.tasks.detect.validator import evaluate_detections

    model, imgsz = confident_model, 64
    task = model.task_spec
    split = task.load_split(task.load_data(str(mini_shapes)), "val")
    pipeline = task.val_pipeline(split, imgsz=imgsz, batch_size=4, device=torch.device("cpu"), workers=0,
                                 cache="ram")
    current: list = [None]

    def batches():
        for batch in pipeline:
            current[0] = batch
            yield batch

    artefacts = DetectArtefacts(model.nc, model.names, tmp_path, plots=False, save_json=True)
    result = evaluate_detections(model, _oracle_forward(current, model.nc, imgsz), batches(),
                                 options=DetectOptions(conf=0.001, iou=0.7, max_det=100), progress=False,
                                 artefacts=artefacts)
    assert 0.3 < result.map50_95 < 0.99 and result.map50 > 0.5  # a real ranking, neither 0 nor perfect

    # Ground truth in COCO form from the same split, ids as save_json writes them (file stems).
    images, annotations = [], []
    for path, labels, (h, w) in zip(split.images, split.labels, split.sizes):
        images.append({"id": path.stem, "width": w, "height": h, "file_name": path.name})
        for cls, cx, cy, bw, bh in labels.tolist():
            annotations.append({"id": len(annotations) + 1, "image_id": path.stem, "category_id": int(cls),
                                "bbox": [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h],
                                "area": bw * w * bh * h, "iscrowd": 0})
    gt = COCO()
    gt.dataset = {"images": images, "annotations": annotations,
                  "categories": [{"id": i, "name": n} for i, n in model.names.items()]}
    gt.createIndex()
    detections = gt.loadRes(str(tmp_path / "predictions.json"))
    assert len(detections.getAnnIds()) == result.n_pred
    evaluator = COCOeval(gt, detections, "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    # The same detections, scored by pycocotools in original pixels and by us in network pixels
    # (boxes touching the border are clipped differently, hence the small tolerance).
    assert evaluator.stats[1] == pytest.approx(result.map50, abs=0.02)
    assert evaluator.stats[0] == pytest.approx(result.map50_95, abs=0.03)


def test_semantic_validation_draws_its_confusion_matrix_without_a_background_row(tmp_path, monkeypatch) -> None:
    from types import SimpleNamespace

    from libreyolo_models.tasks.base import EvalSettings
    from libreyolo_models.tasks.semantic import task as semantic
    from libreyolo_models.tasks.semantic.metrics import semantic_result

    confusion = torch.tensor([[50, 2, 1], [3, 40, 0], [0, 5, 30]])
    monkeypatch.setattr(semantic, "evaluate_semantic",
                        lambda *a, **k: semantic_result(confusion, 4, {0: "bg", 1: "circle", 2: "square"}))
    model = SimpleNamespace(names={0: "bg", 1: "circle", 2: "square"})
    result = semantic.SemanticTask().evaluate(model, lambda x: x, [], progress=False,  # type: ignore[arg-type]
                                              settings=EvalSettings(save_dir=tmp_path, plots=True))
    assert result.confusion.equal(confusion)
    assert _decodes(tmp_path / "confusion_matrix.png")[0] > 50
    assert _decodes(tmp_path / "confusion_matrix_normalized.png")[0] > 50
    off = semantic.SemanticTask().evaluate(model, lambda x: x, [], progress=False,  # type: ignore[arg-type]
                                           settings=EvalSettings(save_dir=tmp_path / "off", plots=False))
    assert off.miou == result.miou and not (tmp_path / "off").exists()
