"""RT-DETR's Hungarian matcher on hand-worked cases: costs, one-to-one assignment, empty and
uneven batches, and a clear error when the outputs are not finite."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from libreyolo_models.layers.giou import generalized_iou
from libreyolo_models.layers.hungarian import EPS_LOG, HungarianMatcher
from libreyolo_models.layers.set_targets import group_targets

FAR = (0.9, 0.9, 0.05, 0.05)


def _sets(boxes: list[list[tuple]], logits: list[list[list[float]]] | None = None, nc: int = 3):
    """One prediction set ``[1, B, Q, ...]`` from per-image box lists (logits 0 unless given)."""
    b = torch.tensor(boxes, dtype=torch.float32)[None]
    lg = torch.zeros(*b.shape[:3], nc) if logits is None else torch.tensor(logits, dtype=torch.float32)[None]
    return lg, b


def _targets(rows: list[tuple], batch: int, nc: int = 3):
    return group_targets(torch.tensor(rows, dtype=torch.float32).reshape(-1, 6), batch, nc)


def test_generalized_iou_hand_worked_values() -> None:
    a = torch.tensor([0.4, 0.4, 0.6, 0.6])
    assert generalized_iou(a, torch.tensor([0.5, 0.4, 0.7, 0.6])).item() == pytest.approx(1 / 3, abs=1e-6)
    assert generalized_iou(a, a).item() == pytest.approx(1.0, abs=1e-6)
    # Disjoint: IoU 0, hull 0.6 x 0.2 = 0.12, union 0.08 -> -(0.12 - 0.08) / 0.12.
    assert generalized_iou(a, torch.tensor([0.8, 0.4, 1.0, 0.6])).item() == pytest.approx(-1 / 3, abs=1e-6)
    pairwise = generalized_iou(a[None, None], torch.stack((a, a + 0.5))[None])
    assert pairwise.shape == (1, 2)


def test_cost_of_one_prediction_is_the_weighted_sum_of_its_three_terms() -> None:
    matcher = HungarianMatcher(log_eps=EPS_LOG)
    logits, boxes = _sets([[(0.6, 0.5, 0.2, 0.2)]])
    cost = matcher.cost(logits, boxes, torch.tensor([[1]]), torch.tensor([[[0.5, 0.5, 0.2, 0.2]]]))
    p = 0.5
    focal = 0.25 * (1 - p) ** 2 * -math.log(p + 1e-8) - 0.75 * p**2 * -math.log(1 - p + 1e-8)
    expected = 2 * focal + 5 * 0.1 - 2 * (1 / 3)  # L1 0.1, GIoU 1/3
    assert cost.shape == (1, 1, 1, 1)
    assert cost.item() == pytest.approx(expected, abs=1e-5)


def test_more_predictions_than_targets_each_target_gets_its_closest_prediction() -> None:
    preds = [FAR, (0.7, 0.7, 0.2, 0.2), (0.3, 0.3, 0.2, 0.2), FAR]
    (matches,) = HungarianMatcher(log_eps=EPS_LOG)(*_sets([preds]), _targets([(0, 0, 0.3, 0.3, 0.2, 0.2), (0, 1, 0.7, 0.7, 0.2, 0.2)], 1))
    pred, gt = matches[0]
    assert dict(zip(gt.tolist(), pred.tolist())) == {0: 2, 1: 1}


def test_duplicate_ground_truths_get_distinct_predictions() -> None:
    box = (0.5, 0.5, 0.3, 0.3)
    preds = [FAR, box, (0.52, 0.5, 0.3, 0.3)]
    (matches,) = HungarianMatcher(log_eps=EPS_LOG)(*_sets([preds]), _targets([(0, 1, *box), (0, 1, *box)], 1))
    pred, gt = matches[0]
    assert sorted(gt.tolist()) == [0, 1] and sorted(pred.tolist()) == [1, 2]  # one-to-one, the far one unused


def test_the_class_score_decides_between_predictions_on_the_same_box() -> None:
    box = (0.5, 0.5, 0.3, 0.3)
    logits = [[[4.0, -4.0, -4.0], [-4.0, -4.0, 4.0]]]
    (matches,) = HungarianMatcher(log_eps=EPS_LOG)(*_sets([[box, box]], logits), _targets([(0, 2, *box)], 1))
    assert matches[0][0].tolist() == [1]


def test_images_with_very_different_box_counts_are_matched_within_themselves() -> None:
    rng = np.random.default_rng(0)
    rows = [(1, int(rng.integers(3)), *rng.uniform(0.2, 0.8, 2), 0.1, 0.1) for _ in range(5)]
    rows += [(2, 0, 0.5, 0.5, 0.4, 0.4)]
    rows = rows[::-1]  # rows need not be sorted by image
    preds = [[tuple(rng.uniform(0.1, 0.9, 4)) for _ in range(7)] for _ in range(3)]
    matcher = HungarianMatcher(log_eps=EPS_LOG)
    targets = _targets(rows, 3)
    (per_image,) = matcher(*_sets(preds), targets)
    assert targets.counts == (0, 5, 1)
    assert [len(p) for p, _ in per_image] == [0, 5, 1]
    pred, gt = per_image[1]
    assert sorted(gt.tolist()) == [0, 1, 2, 3, 4] and len(set(pred.tolist())) == 5
    # The assignment is the optimum of that image's own cost block.
    logits, boxes = _sets(preds)
    labels, gt_boxes, _ = targets.padded(pad_label=0)
    block = matcher.cost(logits, boxes, labels, gt_boxes)[0, 1, :, :5].numpy()
    best = min(sum(block[p, g] for g, p in enumerate(perm)) for perm in _permutations(7, 5))
    assert block[pred, gt].sum() == pytest.approx(best, abs=1e-5)


def _permutations(n: int, k: int):  # noqa: ANN202
    from itertools import permutations

    return permutations(range(n), k)


def test_no_targets_gives_empty_matches_for_every_set_and_image() -> None:
    logits, boxes = _sets([[FAR] * 4, [FAR] * 4])
    matches = HungarianMatcher(log_eps=EPS_LOG)(torch.cat((logits, logits)), torch.cat((boxes, boxes)), _targets([], 2))
    assert len(matches) == 2 and all(len(p) == 0 and len(g) == 0 for row in matches for p, g in row)


def test_non_finite_outputs_are_matched_last_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    """A diverging network's NaN costs do not stop matching (upstream's rule): the NaN query is
    matched only when nothing finite is left, and the loss, non-finite too, makes the trainer
    skip the step (train/divergence.py)."""
    logits, boxes = _sets([[FAR, FAR], [FAR, FAR]])
    boxes[0, 1, 0, 0] = float("nan")
    with caplog.at_level("WARNING"):
        (_, (pred, gt)), = HungarianMatcher(log_eps=EPS_LOG)(logits, boxes, _targets([(1, 0, 0.5, 0.5, 0.2, 0.2)], 2))
    assert pred.tolist() == [1] and gt.tolist() == [0]
    assert "NaN or infinite" in caplog.text


def test_bad_target_rows_name_the_row() -> None:
    with pytest.raises(ValueError, match=r"row 1 has class 7, outside \[0, 3\)"):
        _targets([(0, 1, 0.5, 0.5, 0.1, 0.1), (0, 7, 0.5, 0.5, 0.1, 0.1)], 1)
    with pytest.raises(ValueError, match=r"row 0 has image index 4, outside \[0, 2\)"):
        _targets([(4, 1, 0.5, 0.5, 0.1, 0.1)], 2)
    with pytest.raises(ValueError, match=r"expected \[M, 6\]"):
        group_targets(torch.zeros(3, 5), 1, 3)
