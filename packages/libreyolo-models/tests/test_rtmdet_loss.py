"""RTMDet's dynamic soft-label assigner and loss on hand-worked cases, and against a per-image
reference (``rtmdet_reference.py``, mmdetection's semantics written as plain loops)."""

from __future__ import annotations

import math

import pytest
import torch
from rtmdet_reference import assign_one_image

from libreyolo_models.families.rtmdet.assign import DynamicSoftLabelAssigner
from libreyolo_models.families.rtmdet.loss import RTMDetLoss, aligned_giou
from libreyolo_models.families.rtmdet.nn import STRIDES, grid_corners
from libreyolo_models.layers.boxes import xywh_to_xyxy

CPU = torch.device("cpu")


def _priors(imgsz: int) -> tuple[torch.Tensor, torch.Tensor]:
    points, strides = grid_corners([(imgsz // s, imgsz // s) for s in STRIDES], STRIDES, device=CPU,
                                   dtype=torch.float32)
    return points, strides[:, 0]


def _padded(per_image: list[list[tuple[int, float, float, float, float]]]):  # noqa: ANN202
    """[(class, x1, y1, x2, y2), ...] per image -> labels [B, G], boxes [B, G, 4], mask [B, G]."""
    g = max(1, max(len(rows) for rows in per_image))
    labels = torch.zeros(len(per_image), g, dtype=torch.long)
    boxes = torch.zeros(len(per_image), g, 4)
    mask = torch.zeros(len(per_image), g, dtype=torch.bool)
    for b, rows in enumerate(per_image):
        for j, (c, *box) in enumerate(rows):
            labels[b, j], boxes[b, j], mask[b, j] = c, torch.tensor(box), True
    return labels, boxes, mask


def _random_case(seed: int, counts: list[int], imgsz: int = 128, nc: int = 5):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    priors, strides = _priors(imgsz)
    b, a = len(counts), len(priors)
    logits = torch.randn(b, a, nc, generator=g) * 2
    centres = priors + torch.randn(b, a, 2, generator=g) * 8
    boxes = xywh_to_xyxy(torch.cat((centres, torch.rand(b, a, 2, generator=g) * 60 + 2), -1))
    rows = []
    for n in counts:
        wh = torch.rand(n, 2, generator=g) * 50 + 4
        xy = torch.rand(n, 2, generator=g) * (imgsz - wh) + wh / 2
        cls = torch.randint(0, nc, (n,), generator=g)
        rows.append([(int(c), *map(float, box)) for c, box in zip(cls, xywh_to_xyxy(torch.cat((xy, wh), 1)))])
    return logits, boxes, priors, strides, rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_assignment_equals_the_per_image_reference_for_very_different_box_counts(seed: int) -> None:
    counts = [0, 1, 7, 20]
    logits, boxes, priors, strides, rows = _random_case(seed, counts)
    labels, gt_boxes, mask = _padded(rows)
    got = DynamicSoftLabelAssigner()(logits, boxes, priors, strides, labels, gt_boxes, mask)
    positives = 0
    for b, n in enumerate(counts):
        ref_index, ref_quality = assign_one_image(logits[b], boxes[b], priors, strides, labels[b, :n],
                                                  gt_boxes[b, :n])
        ours = torch.where(got.foreground[b], got.gt_index[b], -1)
        assert torch.equal(ours, ref_index), f"image {b} ({n} boxes)"
        torch.testing.assert_close(got.quality[b], ref_quality, rtol=0, atol=1e-6)
        fg = got.foreground[b]
        assert torch.equal(got.labels[b][fg], labels[b, got.gt_index[b][fg]])
        positives += int(fg.sum())
    assert positives > 20  # the case is not trivially empty


def test_priors_on_a_boxs_edges_are_not_candidates_and_k_counts_the_inside_ones() -> None:
    # 64 px: strides 8/16/32 put priors on multiples of 8. The box 8..24 has the prior (16, 16) of
    # levels 0 and 1 strictly inside; the eight level-0 priors on its edges are outside.
    priors, strides = _priors(64)
    labels, gt_boxes, mask = _padded([[(2, 8.0, 8.0, 24.0, 24.0)]])
    pred_boxes = gt_boxes[:, :1].expand(1, len(priors), 4).clone()  # every prediction is exact: IoU 1
    got = DynamicSoftLabelAssigner()(torch.zeros(1, len(priors), 3), pred_boxes, priors, strides, labels,
                                     gt_boxes, mask)
    chosen = {(float(x), float(y), int(s)) for (x, y), s in zip(priors[got.foreground[0]], strides[got.foreground[0]])}
    assert chosen == {(16.0, 16.0, 8), (16.0, 16.0, 16)}  # k = floor(1 + 1) = 2: both candidates
    assert got.quality[0][got.foreground[0]].tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    assert got.labels[0][got.foreground[0]].tolist() == [2, 2]


def test_dynamic_k_is_the_floor_of_the_candidate_ious_and_the_cheaper_prior_wins() -> None:
    # Same box; the two candidates' predictions overlap it at IoU 0.9 (level 0) and 0.6 (level 1):
    # k = floor(1.5) = 1. Both sit on the box centre, so the cost differs by the IoU term
    # (-3 log 0.9 = 0.32 vs -3 log 0.6 = 1.53) and the class term (0.11 vs 0.007, logits 0):
    # the IoU-0.9 prior is cheaper and is the only positive, with soft label 0.9.
    priors, strides = _priors(64)
    labels, gt_boxes, mask = _padded([[(0, 8.0, 8.0, 24.0, 24.0)]])
    pred = torch.tensor([8.0, 8.0, 24.0, 24.0]).repeat(len(priors), 1)
    level0 = (strides == 8) & (priors == 16).all(1)
    level1 = (strides == 16) & (priors == 16).all(1)
    pred[level0] = torch.tensor([8.0, 8.0, 24.0, 8.0 + 0.9 * 16])  # IoU 0.9 (contained)
    pred[level1] = torch.tensor([8.0, 8.0, 24.0, 8.0 + 0.6 * 16])  # IoU 0.6
    got = DynamicSoftLabelAssigner()(torch.zeros(1, len(priors), 2), pred[None], priors, strides, labels,
                                     gt_boxes, mask)
    assert got.foreground[0].sum() == 1 and bool(got.foreground[0][level0])
    assert got.quality[0][level0].item() == pytest.approx(0.9, abs=1e-5)


def test_a_ground_truth_with_no_prior_inside_gets_nothing_and_the_loss_stays_finite() -> None:
    priors, strides = _priors(64)
    labels, gt_boxes, mask = _padded([[(1, 1.0, 1.0, 5.0, 5.0)]])  # between the priors (0,0) and (8,8)
    boxes = xywh_to_xyxy(torch.cat((priors, torch.full_like(priors, 8.0)), 1))[None]
    got = DynamicSoftLabelAssigner()(torch.zeros(1, len(priors), 2), boxes, priors, strides, labels, gt_boxes, mask)
    assert not got.foreground.any() and got.quality.abs().sum() == 0

    loss = RTMDetLoss(2)
    outputs = _outputs(1, 2, 64)
    targets = torch.tensor([[0.0, 1.0, 3 / 64, 3 / 64, 4 / 64, 4 / 64]])
    total, items = loss(outputs, targets)
    assert torch.isfinite(total) and items[1] == 0


def test_an_image_without_boxes_is_all_background_and_does_not_change_its_neighbour() -> None:
    logits, boxes, priors, strides, rows = _random_case(3, [6, 0])
    labels, gt_boxes, mask = _padded(rows)
    both = DynamicSoftLabelAssigner()(logits, boxes, priors, strides, labels, gt_boxes, mask)
    alone = DynamicSoftLabelAssigner()(logits[:1], boxes[:1], priors, strides, labels[:1], gt_boxes[:1], mask[:1])
    assert not both.foreground[1].any() and both.quality[1].abs().sum() == 0
    assert torch.equal(both.foreground[0], alone.foreground[0]) and both.foreground[0].any()
    assert torch.equal(both.gt_index[0], alone.gt_index[0]) and torch.equal(both.quality[0], alone.quality[0])


def test_a_prior_taken_by_two_ground_truths_goes_to_the_cheaper_one() -> None:
    # Two identical boxes of classes 0 and 1 with the two candidates of the edge case above and
    # exact predictions: k = 2 for both, so both take both priors. Every logit favours class 1,
    # so the class-1 ground truth is cheaper and keeps both.
    priors, strides = _priors(64)
    labels, gt_boxes, mask = _padded([[(0, 8.0, 8.0, 24.0, 24.0), (1, 8.0, 8.0, 24.0, 24.0)]])
    logits = torch.tensor([-3.0, 3.0]).repeat(1, len(priors), 1)
    pred = gt_boxes[:, :1].expand(1, len(priors), 4).clone()
    got = DynamicSoftLabelAssigner()(logits, pred, priors, strides, labels, gt_boxes, mask)
    assert got.foreground.sum() == 2
    assert got.gt_index[0][got.foreground[0]].tolist() == [1, 1]
    assert got.labels[0][got.foreground[0]].tolist() == [1, 1]


def _outputs(batch: int, nc: int, imgsz: int, *, logit: float = 0.0, distance: float = 6.0,
             requires_grad: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    cls = [torch.full((batch, nc, imgsz // s, imgsz // s), logit, requires_grad=requires_grad) for s in STRIDES]
    dist = [torch.full((batch, 4, imgsz // s, imgsz // s), distance, requires_grad=requires_grad) for s in STRIDES]
    return cls, dist


def test_without_boxes_the_loss_is_the_focal_term_of_every_logit_and_every_output_gets_a_gradient() -> None:
    # Target 0 everywhere: each element costs BCE(0, 0) * sigmoid(0)**2 = ln 2 / 4; N clamps to 1.
    outputs = _outputs(2, 3, 64, requires_grad=True)
    total, items = RTMDetLoss(3, cls=0.5)(outputs, torch.zeros(0, 6))
    elements = 2 * 3 * (64 + 16 + 4)
    assert items[0].item() == pytest.approx(0.5 * elements * math.log(2) / 4, rel=1e-6)
    assert items[1].item() == 0.0 and total.item() == pytest.approx(items.sum().item())
    total.backward()
    for t in (*outputs[0], *outputs[1]):
        assert t.grad is not None and torch.isfinite(t.grad).all()  # DDP needs every output in the graph
    assert all(t.grad.abs().sum() > 0 for t in outputs[0])


def test_giou_of_hand_worked_pairs() -> None:
    a = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]])
    b = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 20], [20, 0, 30, 10], [5, 5, 15, 15]])
    # identical; half overlap filling the enclosure; disjoint (enclosure 300, union 200);
    # IoU 25/175 with enclosure 225: 1/7 - 50/225.
    expected = torch.tensor([1.0, 0.5, -1 / 3, 1 / 7 - 50 / 225])
    torch.testing.assert_close(aligned_giou(a, b), expected, rtol=0, atol=1e-6)


def test_box_term_is_twice_the_quality_weighted_one_minus_giou_over_the_summed_quality() -> None:
    torch.manual_seed(0)
    outputs = _outputs(1, 2, 64, distance=5.0)
    targets = torch.tensor([[0.0, 1.0, 0.5, 0.5, 0.4, 0.3]])
    loss = RTMDetLoss(2)
    _, items = loss(outputs, targets)
    # Recompute from the assignment the loss used.
    logits, boxes, priors, strides = loss._flatten(outputs)
    gl, gb, gm = loss.ground_truths(targets, 1, (64, 64), CPU)
    got = loss.assigner(logits, boxes, priors, strides, gl, gb, gm)
    fg = got.foreground[0]
    assert fg.any()
    manual = (1 - aligned_giou(boxes[0][fg], gb[0, got.gt_index[0][fg]])) * got.quality[0][fg]
    assert items[1].item() == pytest.approx(2.0 * manual.sum().item() / max(got.quality.sum().item(), 1.0), rel=1e-5)


def test_normalizer_sum_is_called_exactly_once_per_call_whatever_the_data() -> None:
    calls = []

    def record(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.clone())
        return x * 2  # as if another rank had the same count

    loss = RTMDetLoss(2)
    for targets in (torch.zeros(0, 6), torch.tensor([[0.0, 1.0, 0.5, 0.5, 0.4, 0.3]])):
        before = len(calls)
        loss(_outputs(1, 2, 64), targets, normalizer_sum=record, world_size=2)
        assert len(calls) == before + 1 and calls[-1].dim() == 0


def test_two_ranks_at_half_batch_average_to_one_process_at_the_whole_batch() -> None:
    g = torch.Generator().manual_seed(1)
    cls = [torch.randn(4, 3, 64 // s, 64 // s, generator=g) for s in STRIDES]
    dist = [torch.rand(4, 4, 64 // s, 64 // s, generator=g) * 20 + 2 for s in STRIDES]
    targets = torch.tensor([[0, 0, 0.3, 0.3, 0.3, 0.4], [0, 2, 0.7, 0.6, 0.2, 0.2], [2, 1, 0.5, 0.5, 0.6, 0.5],
                            [3, 0, 0.4, 0.6, 0.3, 0.3], [3, 1, 0.6, 0.3, 0.2, 0.3], [3, 2, 0.5, 0.5, 0.1, 0.1]])
    loss = RTMDetLoss(3)
    whole, whole_items = loss((cls, dist), targets)

    halves = []
    for lo in (0, 2):
        part = targets[(targets[:, 0] >= lo) & (targets[:, 0] < lo + 2)].clone()
        part[:, 0] -= lo
        halves.append(((tuple(c[lo:lo + 2] for c in cls), tuple(d[lo:lo + 2] for d in dist)), part))
    locals_ = []
    for outputs, part in halves:
        loss(outputs, part, normalizer_sum=lambda x: locals_.append(x) or x)
    total_n = sum(locals_)
    ranks = [loss(outputs, part, normalizer_sum=lambda x: total_n, world_size=2) for outputs, part in halves]
    assert whole.item() > 0
    assert (ranks[0][0] + ranks[1][0]).item() / 2 == pytest.approx(whole.item(), rel=1e-5)
    torch.testing.assert_close((ranks[0][1] + ranks[1][1]) / 2, whole_items, rtol=1e-5, atol=1e-7)


def test_bad_inputs_name_the_problem() -> None:
    loss = RTMDetLoss(2)
    with pytest.raises(ValueError, match="class 5 but nc=2"):
        loss(_outputs(1, 2, 64), torch.tensor([[0.0, 5.0, 0.5, 0.5, 0.2, 0.2]]))
    with pytest.raises(ValueError, match=r"level 0: class logits \(1, 3, 8, 8\).*check that nc"):
        loss(_outputs(1, 3, 64), torch.zeros(0, 6))
    with pytest.raises(ValueError, match="cls_scores, distances"):
        loss(_outputs(1, 2, 64)[0], torch.zeros(0, 6))  # type: ignore[arg-type]
