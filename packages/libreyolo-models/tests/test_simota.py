"""SimOTA assignment on hand-worked cases: centre prior, dynamic k, conflicts, padding, batching.

One level of 4 x 4 cells at stride 8 (a 32 x 32 image) unless a test says otherwise: anchor cell
centres at 4, 12, 20, 28 on each axis, index ``4 * row + column``. Boxes are cx, cy, w, h pixels.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo_models.errors import ConfigError
from libreyolo_models.layers.anchors import make_anchors
from libreyolo_models.layers.simota import SimOTAAssigner

CENTRES, STRIDES = make_anchors([(4, 4)], [8], device=torch.device("cpu"), dtype=torch.float32)
CENTRES = CENTRES * 8
FAR = torch.tensor([1000.0, 1000.0, 1.0, 1.0])  # a predicted box that overlaps nothing


def _anchor(column: int, row: int) -> int:
    return 4 * row + column


def _preds(boxes: dict[int, list[float]], batch: int = 1, nc: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform 0.5 scores; every anchor predicts FAR except those given (same in every image)."""
    pred = FAR.repeat(batch, 16, 1)
    for index, box in boxes.items():
        pred[:, index] = torch.tensor(box)
    return torch.full((batch, 16, nc), 0.5), pred


def _assign(scores, pred, gts: list[list[float]], classes: list[int] | None = None):  # noqa: ANN001, ANN202
    gt_boxes = torch.tensor(gts, dtype=torch.float32).reshape(1, -1, 4)
    labels = torch.tensor([classes or [0] * len(gts)])
    mask = torch.ones(1, gt_boxes.shape[1], dtype=torch.bool)
    return SimOTAAssigner()(scores, pred, CENTRES, STRIDES, labels, gt_boxes, mask)


def _positives(assigned, image: int = 0) -> list[int]:  # noqa: ANN001
    return assigned.foreground[image].nonzero().flatten().tolist()


def test_box_on_the_boundary_of_two_cells_goes_to_both_and_only_to_anchors_inside_its_centre_region():
    gt = [16.0, 12.0, 16.0, 16.0]  # centre on the edge between columns 1 and 2, in row 1
    # Four anchors predict the box exactly; two of them (columns 0 and 3) sit exactly 1.5 strides
    # (12 px) from the centre: outside the centre region, so they are not even candidates.
    perfect = {_anchor(c, 1): gt for c in range(4)}
    assigned = _assign(*_preds(perfect), [gt])
    # dynamic k = trunc(sum of the top IoUs among candidates) = trunc(1 + 1) = 2: the two cells.
    assert _positives(assigned) == [_anchor(1, 1), _anchor(2, 1)]
    assert assigned.gt_index[0, _anchor(1, 1)] == assigned.gt_index[0, _anchor(2, 1)] == 0
    torch.testing.assert_close(assigned.ious[0, [_anchor(1, 1), _anchor(2, 1)]], torch.ones(2))
    assert assigned.num_foreground == 2


def test_dynamic_k_is_the_truncated_sum_of_the_best_ious_and_takes_the_cheapest():
    gt = [12.0, 12.0, 16.0, 16.0]  # [4, 20] x [4, 20]
    shifted = {  # IoU with the gt: 1.0, 0.684 (3 px off in y), 0.6 (4 px off in x), 0.231 (10 px)
        _anchor(1, 1): gt,
        _anchor(1, 0): [12.0, 9.0, 16.0, 16.0],
        _anchor(0, 1): [8.0, 12.0, 16.0, 16.0],
        _anchor(2, 1): [22.0, 12.0, 16.0, 16.0],
    }
    assigned = _assign(*_preds(shifted), [gt])
    # trunc(1.0 + 0.684 + 0.6 + 0.231) = 2 positives: the two cheapest (equal class cost, so the
    # two best IoUs).
    assert assigned.num_foreground == 2
    assert _positives(assigned) == [_anchor(1, 0), _anchor(1, 1)]
    torch.testing.assert_close(assigned.ious[0, _anchor(1, 0)], torch.tensor(208 / 304))


def test_a_gt_without_good_predictions_still_gets_one_positive():
    gt = [12.0, 12.0, 16.0, 16.0]
    assigned = _assign(*_preds({}), [gt])  # every prediction is FAR: all IoUs are 0
    assert assigned.num_foreground == 1  # dynamic k is at least 1
    (anchor,) = _positives(assigned)
    assert abs(CENTRES[anchor] - 12.0).max() < 12.0 and assigned.ious[0, anchor] == 0


def test_anchor_wanted_by_two_gts_goes_to_the_one_it_costs_least():
    a, b = [12.0, 12.0, 16.0, 16.0], [20.0, 12.0, 16.0, 16.0]
    contested = _anchor(1, 1)
    # Its box overlaps A by 0.778 and B by 0.455; each gt's dynamic k is 1 and each wants it.
    assigned = _assign(*_preds({contested: [14.0, 12.0, 16.0, 16.0]}), [a, b])
    assert _positives(assigned) == [contested] and assigned.gt_index[0, contested] == 0
    torch.testing.assert_close(assigned.ious[0, contested], torch.tensor(224 / 288))


def test_classification_cost_prefers_the_anchor_that_already_scores_the_class():
    gt = [16.0, 12.0, 16.0, 16.0]
    scores, pred = _preds({_anchor(1, 1): gt, _anchor(2, 1): gt})
    pred[0, _anchor(1, 1), 0] += 1.0  # both still overlap the gt well: k = trunc(0.88 + 1.0) = 1
    scores[0, _anchor(1, 1), 1] = 0.9
    scores[0, _anchor(2, 1), 1] = 0.1
    assigned = _assign(scores, pred, [gt], classes=[1])
    assert _positives(assigned) == [_anchor(1, 1)]  # the better class score wins over the better IoU
    assert assigned.labels[0, _anchor(1, 1)] == 1


def test_a_gt_with_no_anchor_in_its_centre_region_gets_none_and_takes_none():
    inside = [12.0, 12.0, 16.0, 16.0]
    outside = [-40.0, -40.0, 16.0, 16.0]  # centre 44 px beyond the nearest anchor: no candidate
    preds = _preds({_anchor(1, 1): inside, _anchor(0, 0): [4.0, 4.0, 8.0, 8.0]})
    alone = _assign(*preds, [inside])
    both = _assign(*preds, [inside, outside])
    assert _positives(both) == _positives(alone) == [_anchor(1, 1)]
    assert (both.gt_index[both.foreground] == 0).all()
    only_outside = _assign(*preds, [outside])
    assert only_outside.num_foreground == 0 and not only_outside.foreground.any()


def test_images_with_0_1_and_30_boxes_assign_as_they_would_alone():
    """Padding to the largest image (30 columns) and batching change nothing, image by image."""
    gen = torch.Generator().manual_seed(3)
    centres, strides = make_anchors([(8, 8), (4, 4), (2, 2)], [8, 16, 32], device=torch.device("cpu"),
                                    dtype=torch.float32)
    centres = (centres * strides).contiguous()
    a, nc = centres.shape[0], 4
    counts = [0, 1, 30]
    gts = [torch.cat((torch.rand(n, 2, generator=gen) * 56 + 4, torch.rand(n, 2, generator=gen) * 24 + 4), 1)
           for n in counts]
    labels = [torch.randint(0, nc, (n,), generator=gen) for n in counts]
    scores = torch.rand(3, a, nc, generator=gen)
    pred = torch.cat((centres + torch.randn(a, 2, generator=gen) * 4, torch.rand(a, 2, generator=gen) * 24 + 4), 1)
    pred = pred.expand(3, a, 4).clone()
    width = max(counts)
    padded_boxes, padded_labels = torch.zeros(3, width, 4), torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros(3, width, dtype=torch.bool)
    for i, n in enumerate(counts):
        padded_boxes[i, :n], padded_labels[i, :n], mask[i, :n] = gts[i], labels[i], True
    assigner = SimOTAAssigner()
    batched = assigner(scores, pred, centres, strides, padded_labels, padded_boxes, mask)
    assert batched.foreground[0].sum() == 0 and batched.foreground[1].sum() >= 1
    assert batched.foreground[2].sum() > 1
    total = 0
    for i, n in enumerate(counts):
        alone = assigner(scores[i:i + 1], pred[i:i + 1], centres, strides, labels[i][None],
                         gts[i][None], torch.ones(1, n, dtype=torch.bool))
        fg = alone.foreground[0]
        assert torch.equal(batched.foreground[i], fg), i
        assert torch.equal(batched.gt_index[i][fg], alone.gt_index[0][fg]), i
        assert torch.equal(batched.ious[i], alone.ious[0]), i
        assert (batched.gt_index[i][fg] < n).all()  # padding columns are never assigned
        total += int(fg.sum())
    assert batched.num_foreground == total


def test_padding_columns_change_nothing():
    gt = [12.0, 12.0, 16.0, 16.0]
    scores, pred = _preds({_anchor(1, 1): gt})
    plain = _assign(scores, pred, [gt])
    boxes = torch.tensor([[gt, [20.0, 20.0, 16.0, 16.0]]])  # a second column, masked out
    padded = SimOTAAssigner()(scores, pred, CENTRES, STRIDES, torch.zeros(1, 2, dtype=torch.long), boxes,
                              torch.tensor([[True, False]]))
    assert torch.equal(padded.foreground, plain.foreground) and torch.equal(padded.ious, plain.ious)


def test_no_ground_truth_columns_make_everything_background():
    scores, pred = _preds({})
    assigned = SimOTAAssigner()(scores, pred, CENTRES, STRIDES, torch.zeros(1, 0, dtype=torch.long),
                                torch.zeros(1, 0, 4), torch.zeros(1, 0, dtype=torch.bool))
    assert not assigned.foreground.any() and assigned.num_foreground == 0 and (assigned.ious == 0).all()


def test_bad_settings_and_shapes_are_rejected_with_the_values():
    with pytest.raises(ConfigError, match="radius=0"):
        SimOTAAssigner(radius=0)
    with pytest.raises(ConfigError, match="candidates_k=0"):
        SimOTAAssigner(candidates_k=0)
    scores, pred = _preds({})
    with pytest.raises(ValueError, match=r"anchor_centres \(15, 2\)"):
        SimOTAAssigner()(scores, pred, CENTRES[:15], STRIDES, torch.zeros(1, 1, dtype=torch.long),
                         torch.zeros(1, 1, 4), torch.ones(1, 1, dtype=torch.bool))
