"""Task-aligned assigner and target padding, on hand-built cases with known answers."""

from __future__ import annotations

import pytest
import torch

from libreyolo_models.errors import ConfigError
from libreyolo_models.layers.anchors import make_anchors
from libreyolo_models.layers.assign import TaskAlignedAssigner, anchors_inside_boxes, pad_targets

NC = 3


def _grid_points() -> torch.Tensor:
    """8x8 anchor centres of a 64x64 image at stride 8, in pixels: 4, 12, ..., 60."""
    points, strides = make_anchors([(8, 8)], [8], device=torch.device("cpu"), dtype=torch.float32)
    return points * strides


def _boxes_around(points: torch.Tensor, half: float) -> torch.Tensor:
    """One square predicted box per anchor, centred on it: ``[1, A, 4]`` xyxy."""
    return torch.cat((points - half, points + half), -1)[None]


def _index(x: float, y: float) -> int:
    """Anchor index of the cell whose centre is (x, y) pixels (row-major, stride 8)."""
    return int((y - 4) // 8) * 8 + int((x - 4) // 8)


def _assign(assigner, scores, boxes, gt_boxes, gt_labels, gt_mask=None):
    gt_boxes = torch.tensor(gt_boxes, dtype=torch.float32)[None]
    gt_labels = torch.tensor(gt_labels)[None]
    gt_mask = torch.ones(gt_labels.shape, dtype=torch.bool) if gt_mask is None else torch.tensor(gt_mask)[None]
    return assigner(scores, boxes, _grid_points(), gt_labels, gt_boxes, gt_mask)


def test_anchors_inside_a_single_gt_are_assigned_to_it_and_the_rest_are_background():
    points = _grid_points()
    scores = torch.full((1, 64, NC), 0.5)
    result = _assign(TaskAlignedAssigner(), scores, _boxes_around(points, 8.0), [[16, 16, 40, 32]], [2])
    inside = {_index(x, y) for x in (20, 28, 36) for y in (20, 28)}  # 6 < topk: all are candidates
    assert set(result.foreground[0].nonzero()[:, 0].tolist()) == inside
    fg = result.foreground[0]
    assert (result.labels[0][fg] == 2).all()
    assert torch.equal(result.boxes[0][fg], torch.tensor([[16.0, 16, 40, 32]]).expand(6, 4))
    assert (result.scores[0][fg][:, 2] > 0).all() and (result.scores[0][fg][:, [0, 1]] == 0).all()
    assert (result.scores[0][~fg] == 0).all()


def test_anchors_outside_every_box_stay_background_even_with_perfect_predictions():
    points = _grid_points()
    boxes = _boxes_around(points, 8.0)
    outside = _index(52, 52)
    boxes[0, outside] = torch.tensor([16.0, 16, 40, 32])  # IoU 1 with the ground truth, but outside it
    scores = torch.full((1, 64, NC), 0.1)
    scores[0, outside] = 0.99
    result = _assign(TaskAlignedAssigner(topk=64), scores, boxes, [[16, 16, 40, 32]], [1])
    assert not result.foreground[0, outside]
    assert (result.scores[0, outside] == 0).all()
    assert result.foreground.sum() == 6


@pytest.mark.parametrize("winner", [0, 1])
def test_anchor_claimed_by_two_gts_goes_to_the_one_its_box_overlaps_most(winner):
    points = _grid_points()
    gts = [[0, 0, 32, 32], [16, 16, 48, 48]]
    shared = _index(28, 28)  # inside both ground truths
    boxes = _boxes_around(points, 8.0)
    boxes[0, shared] = torch.tensor([[2.0, 2, 30, 30], [18.0, 18, 46, 46]][winner])
    scores = torch.full((1, 64, NC), 0.5)
    result = _assign(TaskAlignedAssigner(topk=64), scores, boxes, gts, [0, 1])
    assert result.foreground[0, shared]
    assert result.gt_index[0, shared] == winner
    assert result.labels[0, shared] == winner
    assert torch.equal(result.boxes[0, shared], torch.tensor(gts[winner], dtype=torch.float32))
    # Scores only in the winner's class: the anchor is not a positive of the loser.
    assert result.scores[0, shared, 1 - winner] == 0


def test_each_gt_gets_at_most_topk_anchors_the_best_aligned_ones():
    gt = [0.0, 0, 64, 64]  # every anchor is inside
    boxes = torch.tensor(gt).expand(1, 64, 4).clone()  # IoU 1 everywhere: only scores differ
    scores = torch.full((1, 64, NC), 0.5)
    scores[0, :, 0] = torch.linspace(0.1, 0.9, 64)
    result = _assign(TaskAlignedAssigner(topk=3), scores, boxes, [gt], [0])
    assert result.foreground[0].nonzero()[:, 0].tolist() == [61, 62, 63]


def test_soft_targets_give_the_best_anchor_its_gts_best_iou_and_scale_the_others_by_alignment():
    points = _grid_points()
    gt = torch.tensor([16.0, 16, 40, 32])
    boxes = _boxes_around(points, 8.0)
    best, other = _index(28, 20), _index(20, 28)
    boxes[0, best] = torch.tensor([17.0, 16, 40, 32])  # IoU 23/24
    boxes[0, other] = torch.tensor([16.0, 16, 34, 32])  # IoU 18/24
    scores = torch.full((1, 64, NC), 0.01)
    scores[0, best, 1], scores[0, other, 1] = 0.8, 0.6
    assigner = TaskAlignedAssigner(alpha=0.5, beta=6.0)
    result = _assign(assigner, scores, boxes, [gt.tolist()], [1])
    align_best = 0.8**0.5 * (23 / 24) ** 6
    align_other = 0.6**0.5 * (18 / 24) ** 6
    assert result.scores[0, best, 1].item() == pytest.approx(23 / 24, rel=1e-5)
    assert result.scores[0, other, 1].item() == pytest.approx(23 / 24 * align_other / align_best, rel=1e-4)
    assert result.scores[0].max().item() == pytest.approx(23 / 24, rel=1e-5)


def test_masked_padding_columns_change_nothing_and_are_never_assigned():
    points = _grid_points()
    torch.manual_seed(0)
    boxes = _boxes_around(points, 6.0) + torch.rand(1, 64, 4) * 4
    scores = torch.rand(1, 64, NC)
    gts, labels = [[8, 8, 40, 30], [30, 20, 60, 60]], [0, 2]
    plain = _assign(TaskAlignedAssigner(), scores, boxes, gts, labels)
    padded = _assign(TaskAlignedAssigner(), scores, boxes, gts + [[0, 0, 64, 64], [0, 0, 0, 0]],
                     labels + [1, 0], gt_mask=[True, True, False, False])
    assert (padded.gt_index[padded.foreground] < 2).all()
    for name in ("labels", "scores", "foreground", "gt_index"):
        assert torch.equal(getattr(plain, name), getattr(padded, name)), name
    fg = plain.foreground
    assert torch.equal(plain.boxes[fg], padded.boxes[fg])


def test_images_are_assigned_independently_of_the_rest_of_the_batch():
    points = _grid_points()
    torch.manual_seed(1)
    boxes = _boxes_around(points, 6.0).expand(2, 64, 4) + torch.rand(2, 64, 4) * 4
    scores = torch.rand(2, 64, NC)
    gt_boxes = torch.tensor([[[8.0, 8, 40, 30], [0, 0, 0, 0]], [[30, 20, 60, 60], [4, 4, 20, 50]]])
    gt_labels = torch.tensor([[0, 0], [2, 1]])
    gt_mask = torch.tensor([[True, False], [True, True]])
    batch = TaskAlignedAssigner()(scores, boxes, points, gt_labels, gt_boxes, gt_mask)
    alone = TaskAlignedAssigner()(scores[:1], boxes[:1], points, gt_labels[:1, :1], gt_boxes[:1, :1],
                                  gt_mask[:1, :1])
    assert batch.foreground[0].any()
    assert torch.equal(batch.foreground[:1], alone.foreground)
    assert torch.equal(batch.scores[:1], alone.scores)


def test_no_ground_truth_columns_make_everything_background():
    result = TaskAlignedAssigner()(torch.rand(2, 64, NC), _boxes_around(_grid_points(), 8.0).expand(2, 64, 4),
                                   _grid_points(), torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, 4),
                                   torch.zeros(2, 0, dtype=torch.bool))
    assert not result.foreground.any()
    assert (result.scores == 0).all()


def test_points_on_a_box_edge_are_not_inside():
    points = torch.tensor([[10.0, 10.0], [20.0, 15.0], [15.0, 15.0]])
    inside = anchors_inside_boxes(points, torch.tensor([[10.0, 10, 20, 20], [15, 15, 15, 15]]))
    assert inside.tolist() == [[False, False, True], [False, False, False]]


def test_pad_targets_groups_rows_by_image_in_order_and_masks_the_padding():
    rows = torch.tensor([[2, 0, 0.1], [0, 1, 0.2], [2, 2, 0.3], [0, 0, 0.4], [2, 1, 0.5]])
    padded, mask = pad_targets(rows, 4)
    assert padded.shape == (4, 3, 2)  # width = the largest per-image count (3, image 2)
    assert mask.tolist() == [[True, True, False], [False] * 3, [True] * 3, [False] * 3]
    assert torch.equal(padded[0, :2], torch.tensor([[1, 0.2], [0, 0.4]]))
    assert torch.equal(padded[2], torch.tensor([[0, 0.1], [2, 0.3], [1, 0.5]]))
    assert (padded[~mask] == 0).all()


def test_pad_targets_with_no_rows_keeps_one_masked_column():
    padded, mask = pad_targets(torch.zeros(0, 6), 3)
    assert padded.shape == (3, 1, 5) and not mask.any()


def test_pad_targets_wider_than_needed_only_adds_masked_columns():
    rows = torch.tensor([[1, 0, 0.1], [1, 2, 0.3]])
    tight, tight_mask = pad_targets(rows, 2)
    wide, wide_mask = pad_targets(rows, 2, width=5)
    assert torch.equal(wide[:, :2], tight) and torch.equal(wide_mask[:, :2], tight_mask)
    assert not wide_mask[:, 2:].any()


def test_pad_targets_rejects_an_image_index_outside_the_batch_naming_the_row():
    with pytest.raises(ValueError, match=r"row 1 has image index 5 .* \[0, 2\)"):
        pad_targets(torch.tensor([[0, 0, 0.1], [5, 0, 0.2]]), 2)


def test_pad_targets_rejects_a_width_too_small_for_the_data():
    with pytest.raises(ValueError, match="width=1 is smaller than the 2 boxes"):
        pad_targets(torch.tensor([[0, 0, 0.1], [0, 0, 0.2]]), 1, width=1)


def test_assigner_rejects_bad_settings_with_the_value():
    with pytest.raises(ConfigError, match="topk=0"):
        TaskAlignedAssigner(topk=0)
    with pytest.raises(ConfigError, match="beta=-1"):
        TaskAlignedAssigner(beta=-1)
