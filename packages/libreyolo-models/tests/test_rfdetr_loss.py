"""RF-DETR's matcher and set loss on hand-worked cases: the focal class cost, Group DETR's
per-group matching, duplicate boxes, empty images, very different counts per image, the IA-BCE
class term, and the normalisation that makes two ranks equal one process."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from libreyolo_models.families.rfdetr.loss import RFDETRLoss, pair_index
from libreyolo_models.layers.hungarian import HungarianMatcher
from libreyolo_models.layers.set_targets import group_targets

GAINS = {"cls": 1.0, "bbox": 5.0, "giou": 2.0}


def targets(rows: list[tuple[float, ...]], batch: int, nc: int = 3):  # noqa: ANN201 - GroupedTargets
    return group_targets(torch.tensor(rows, dtype=torch.float32).reshape(-1, 6), batch, nc)


def outputs(logits: torch.Tensor, boxes: torch.Tensor, enc: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """A training-output dict with no earlier decoder layer; the proposals default to the queries."""
    enc_logits, enc_boxes = enc if enc is not None else (logits, boxes)
    return {"pred_logits": logits, "pred_boxes": boxes, "aux_outputs": [],
            "enc_outputs": {"pred_logits": enc_logits, "pred_boxes": enc_boxes}}


def test_class_cost_is_the_focal_difference_of_predicting_the_class() -> None:
    """Logit 0 (p = 1/2): positive 0.25 * 0.25 * ln 2, negative 0.75 * 0.25 * ln 2, so the class
    cost is -0.125 ln 2; an exact box adds nothing but -2 * GIoU = -2."""
    matcher = HungarianMatcher(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0)
    box = torch.tensor([[[[0.5, 0.5, 0.2, 0.2]]]])
    cost = matcher.cost(torch.zeros(1, 1, 1, 3), box, torch.tensor([[1]]), box[0, :, 0])
    assert cost.item() == pytest.approx(2 * -0.125 * math.log(2) - 2.0, abs=1e-6)


def test_each_box_takes_its_nearest_query_and_duplicates_take_two_queries() -> None:
    boxes = torch.tensor([[[0.2, 0.2, 0.1, 0.1], [0.8, 0.8, 0.1, 0.1], [0.21, 0.2, 0.1, 0.1], [0.5, 0.5, 0.3, 0.3]]])
    logits = torch.zeros(1, 1, 4, 3)
    gt = targets([(0, 0, 0.8, 0.8, 0.1, 0.1), (0, 1, 0.2, 0.2, 0.1, 0.1), (0, 1, 0.2, 0.2, 0.1, 0.1)], 1)
    (pred, truth), = HungarianMatcher()(logits, boxes[None], gt)[0]
    assigned = dict(zip(truth.tolist(), pred.tolist()))
    assert assigned[0] == 1                       # the far corner box: query 1
    assert {assigned[1], assigned[2]} == {0, 2}   # the two identical boxes: the two near queries


def test_each_query_group_is_matched_on_its_own() -> None:
    """Group DETR: 2 groups of 2 queries; the box gets one query in each, offsets by group."""
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1], [0.9, 0.9, 0.1, 0.1], [0.5, 0.5, 0.21, 0.2]]])
    gt = targets([(0, 2, 0.5, 0.5, 0.2, 0.2)], 1)
    (pred, truth), = HungarianMatcher()(torch.zeros(1, 1, 4, 3), boxes[None], gt, groups=2)[0]
    assert pred.tolist() == [0, 3] and truth.tolist() == [0, 0]
    with pytest.raises(ValueError, match="4 queries do not split into 3 equal groups"):
        HungarianMatcher()(torch.zeros(1, 1, 4, 3), boxes[None], gt, groups=3)


def test_images_without_boxes_and_uneven_counts_match_per_image() -> None:
    gt = targets([(0, 0, 0.3, 0.3, 0.2, 0.2)] + [(2, 1, 0.1 * k, 0.5, 0.05, 0.05) for k in range(1, 6)], 3)
    matches = HungarianMatcher()(torch.zeros(1, 3, 6, 3), torch.rand(1, 3, 6, 4), gt)[0]
    assert [len(p) for p, _ in matches] == [1, 0, 5]
    assert sorted(matches[2][1].tolist()) == [0, 1, 2, 3, 4]
    index = pair_index([matches], gt.offsets(), torch.device("cpu"))
    assert index.shape == (4, 6) and sorted(index[3].tolist()) == [0, 1, 2, 3, 4, 5]


def test_non_finite_costs_are_matched_last_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    boxes = torch.tensor([[[[0.5, 0.5, 0.2, 0.2], [float("nan"), 0.5, 0.2, 0.2]]]])
    gt = targets([(0, 0, 0.5, 0.5, 0.2, 0.2)], 1)
    matcher = HungarianMatcher()
    with caplog.at_level(logging.WARNING, logger="libreyolo_models.layers.hungarian"):
        for _ in range(2):
            (pred, _), = matcher(torch.zeros(1, 1, 2, 3), boxes, gt)[0]
            assert pred.tolist() == [0]
    assert len([r for r in caplog.records if "NaN or infinite" in r.getMessage()]) == 1


def test_an_exact_box_costs_no_box_loss_and_the_class_term_is_ia_bce_by_hand() -> None:
    """One query on its box (IoU 1): L1 = GIoU loss = 0. Its class logit x0 gets target
    t = max(p0**0.25, 0.01) (BCE with soft target t); the other class is a negative weighted by
    p1**2. The proposals repeat the query, so every term counts twice; N = 1 box, 1 group."""
    x = torch.tensor([[[0.3, -1.2, 0.4]]])
    box = torch.tensor([[[0.4, 0.6, 0.2, 0.3]]])
    gt = targets([(0, 0, 0.4, 0.6, 0.2, 0.3)], 1)
    total, items = RFDETRLoss(GAINS)(outputs(x, box), gt, groups=1)
    p = x.sigmoid()[0, 0]
    t = p[0] ** 0.25
    positive = F.binary_cross_entropy(p[0], t)
    negatives = sum(p[c] ** 2 * -torch.log(1 - p[c]) for c in (1, 2))
    assert items[0].item() == pytest.approx(2 * (positive + negatives).item(), rel=1e-5)
    assert items[1].item() == pytest.approx(0.0, abs=1e-6) and items[2].item() == pytest.approx(0.0, abs=1e-6)
    assert total.item() == pytest.approx(items.sum().item())


def test_a_batch_without_boxes_still_reaches_the_logits() -> None:
    logits = torch.randn(2, 5, 4, requires_grad=True)
    boxes = torch.rand(2, 5, 4, requires_grad=True)
    total, items = RFDETRLoss(GAINS)(outputs(logits, boxes), targets([], 2), groups=1)
    total.backward()
    assert torch.isfinite(total) and items[1:].abs().sum() == 0
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    assert boxes.grad is not None  # connected through the empty pair selection (zero gradient)


def test_two_ranks_at_half_the_batch_give_the_loss_of_one_process() -> None:
    torch.manual_seed(0)
    logits, boxes = torch.randn(2, 6, 3), torch.rand(2, 6, 4) * 0.5 + 0.25
    rows = [(0, 0, 0.3, 0.3, 0.2, 0.2), (1, 1, 0.6, 0.5, 0.3, 0.2), (1, 2, 0.4, 0.7, 0.1, 0.2)]
    loss = RFDETRLoss(GAINS)
    whole, _ = loss(outputs(logits, boxes), targets(rows, 2), groups=2)
    all_boxes = torch.tensor(3.0 * 2)  # every rank's count times the 2 groups, summed
    halves = []
    for image in (0, 1):
        mine = [(0.0, *r[1:]) for r in rows if r[0] == image]
        part, _ = loss(outputs(logits[image:image + 1], boxes[image:image + 1]), targets(mine, 1), groups=2,
                       normalizer_sum=lambda local: all_boxes, world_size=2)
        halves.append(part)
    assert ((halves[0] + halves[1]) / 2).item() == pytest.approx(whole.item(), rel=1e-6)


def test_pair_index_is_empty_without_matches() -> None:
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert pair_index([[empty, empty]], [0, 0], torch.device("cpu")).shape == (4, 0)
