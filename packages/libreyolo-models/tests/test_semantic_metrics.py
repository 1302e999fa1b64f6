"""Semantic metrics on hand-worked cases and against scikit-learn's independent computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo_models.data.letterbox_images import letterbox
from libreyolo_models.tasks.semantic.class_map import SemanticMask, map_to_original
from libreyolo_models.tasks.semantic.metrics import SemanticMetrics, semantic_result

IGN = 255


def _t(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64)


def test_hand_worked_image_with_ignore_pixels() -> None:
    truth = _t([[0, 0, 1, 1],
                [0, 0, 1, 1],
                [IGN, IGN, 2, 2]])
    pred = _t([[0, 1, 1, 1],
               [0, 0, 1, 2],
               [2, 2, 2, 2]])  # the two ignore pixels are predicted 2: they must not count
    metrics = SemanticMetrics(3)
    metrics.update(pred, truth)
    result = metrics.compute()
    # class 0: TP 3, FN 1 (pred 1), FP 0 -> 3/4; class 1: TP 3, FP 1, FN 1 -> 3/5; class 2: TP 2, FP 1 -> 2/3
    assert result.iou == pytest.approx({0: 3 / 4, 1: 3 / 5, 2: 2 / 3})
    assert result.miou == pytest.approx((3 / 4 + 3 / 5 + 2 / 3) / 3)
    assert result.pixel_accuracy == pytest.approx(8 / 10)
    assert result.confusion.tolist() == [[3, 1, 0], [0, 3, 1], [0, 0, 2]]
    assert result.fitness == result.miou and result.as_dict()["metrics/mIoU"] == result.miou


def test_a_class_absent_from_truth_and_prediction_is_left_out_of_the_mean() -> None:
    truth, pred = _t([[0, 0, 1, 1]]), _t([[0, 0, 1, 0]])
    metrics = SemanticMetrics(4)  # classes 2 and 3 appear nowhere in this val split
    metrics.update(pred, truth)
    result = metrics.compute()
    assert set(result.iou) == {0, 1}
    assert result.miou == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert "-" in result.table().splitlines()[-1]  # shown as having no IoU, not 0


def test_a_class_predicted_but_absent_from_truth_counts_as_zero() -> None:
    truth, pred = _t([[0, 0, 0, 0]]), _t([[0, 0, 0, 3]])
    metrics = SemanticMetrics(4)
    metrics.update(pred, truth)
    result = metrics.compute()
    assert result.iou == pytest.approx({0: 3 / 4, 3: 0.0}) and result.miou == pytest.approx(3 / 8)


def test_nothing_labelled_gives_zeros_not_nan() -> None:
    metrics = SemanticMetrics(2)
    metrics.update(_t([[0, 1]]), _t([[IGN, IGN]]))
    result = metrics.compute()
    assert (result.miou, result.pixel_accuracy, result.iou) == (0.0, 0.0, {})
    assert SemanticMetrics(2).compute().miou == 0.0


def test_matches_scikit_learn_on_random_maps_accumulated_over_images() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    nc = 6
    metrics = SemanticMetrics(nc)
    truths, preds = [], []
    for _ in range(5):
        truth = rng.integers(0, nc - 1, size=(17, 23))  # class 5 never in the truth...
        truth[rng.random(truth.shape) < 0.1] = IGN
        pred = np.where(rng.random(truth.shape) < 0.6, truth, rng.integers(0, nc - 1, size=truth.shape))
        pred[pred == IGN] = 0
        metrics.update(torch.from_numpy(pred), torch.from_numpy(truth))
        truths.append(truth.ravel())
        preds.append(pred.ravel())
    y_true, y_pred = np.concatenate(truths), np.concatenate(preds)
    keep = y_true != IGN
    y_true, y_pred = y_true[keep], y_pred[keep]
    present = sorted(set(y_true) | set(y_pred))  # ...nor predicted: sklearn is asked only about present classes
    expected = sklearn_metrics.jaccard_score(y_true, y_pred, labels=present, average=None)
    result = metrics.compute()
    assert sorted(result.iou) == present == [0, 1, 2, 3, 4]
    assert [result.iou[c] for c in present] == pytest.approx(expected.tolist(), abs=1e-12)
    assert result.miou == pytest.approx(float(expected.mean()), abs=1e-12)
    assert result.pixel_accuracy == pytest.approx(sklearn_metrics.accuracy_score(y_true, y_pred), abs=1e-12)
    assert result.n_images == 5


def test_shards_summed_equal_one_pass() -> None:
    rng = np.random.default_rng(1)
    maps = [(torch.from_numpy(rng.integers(0, 3, (8, 8))), torch.from_numpy(rng.integers(0, 3, (8, 8))))
            for _ in range(4)]
    whole, parts = SemanticMetrics(3), [SemanticMetrics(3), SemanticMetrics(3)]
    for i, (pred, truth) in enumerate(maps):
        whole.update(pred, truth)
        parts[i % 2].update(pred, truth)
    merged = semantic_result(parts[0].matrix() + parts[1].matrix(), 4)
    assert merged.miou == whole.compute().miou and torch.equal(merged.confusion, whole.matrix())


def test_mismatched_shapes_are_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"prediction of shape \(2, 2\) does not match its mask \(2, 3\)"):
        SemanticMetrics(2).update(torch.zeros(2, 2), torch.zeros(2, 3))


def test_class_map_goes_back_to_the_original_image_through_the_letterbox() -> None:
    image = np.zeros((30, 60, 3), dtype=np.uint8)  # wide: padded top and bottom
    _, info = letterbox(image, 64)
    class_map = torch.full((64, 64), 9, dtype=torch.int64)  # 9 marks the padding
    new_h = round(30 * info.ratio)
    top = int(info.pad[1])
    class_map[top:top + new_h, :32] = 1
    class_map[top:top + new_h, 32:] = 2
    back = map_to_original(class_map, info)
    assert back.shape == (30, 60) and 9 not in back.unique().tolist()
    assert (back[:, :30] == 1).all() and (back[:, 30:] == 2).all()


def test_semantic_mask_reports_shares_and_tints_the_image() -> None:
    mask = SemanticMask(_t([[0, 0, 0, 1]]))
    assert mask.classes() == [0, 1] and mask.pixel_shares() == {0: 0.75, 1: 0.25}
    image = np.full((1, 4, 3), 200, dtype=np.uint8)
    tinted = mask.overlay(image)
    assert tinted.shape == image.shape and tinted.dtype == np.uint8
    assert not np.array_equal(tinted[0, 0], tinted[0, 3])  # two classes, two colours
