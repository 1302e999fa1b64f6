"""D-FINE's loss kit on hand-worked cases: the bin positions W(n), box <-> edge-offset bins, the
union of matches, the classification terms (varifocal, DEIM's MAL), DDF's mixing, the loss over
empty, duplicate and uneven targets, and its normalisation across ranks; DEIMv2's IoU-ordered
matching. (``layers.detr.fdr``, ``fdr_loss``, ``set_terms``, ``matcher``.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from libreyolo_models.layers.boxes import xywh_to_xyxy
from libreyolo_models.layers.detr.denoising import build_denoising
from libreyolo_models.layers.detr.fdr import bbox2distance, distance2bbox, integral, weighting_function
from libreyolo_models.layers.detr.fdr_loss import FDRLoss, union_matches
from libreyolo_models.layers.detr.set_terms import matchability_aware, varifocal
from libreyolo_models.layers.hungarian import EPS_LOG, HungarianMatcher
from libreyolo_models.layers.set_targets import group_targets

UP, REG_SCALE = torch.tensor([0.5]), torch.tensor([4.0])
GAINS = {"vfl": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5}


def test_weighting_function_is_symmetric_dense_in_the_middle_and_ends_at_twice_up_times_scale() -> None:
    w = weighting_function(32, UP, REG_SCALE)
    assert w.shape == (33,) and w[16] == 0 and w[0] == -4 and w[32] == 4
    torch.testing.assert_close(w, -w.flip(0))
    step = 3.0 ** (1 / 15)          # (up * reg_scale + 1) ** (2 / (reg_max - 2))
    assert w[17].item() == pytest.approx(step - 1, rel=1e-6) and w[31].item() == pytest.approx(step**15 - 1, rel=1e-6)
    assert (w.diff() > 0).all() and w.diff()[16] < w.diff()[30]  # finer steps near zero


def test_the_reference_box_itself_puts_every_edge_in_the_middle_bin() -> None:
    """Offset 0 is bin 16's position; rounding may land just below it (bin 15 with all of the
    weight on its right neighbour): either way the whole target sits on bin 16."""
    ref = torch.tensor([[0.5, 0.5, 0.2, 0.4]])
    target, right, left = bbox2distance(ref, xywh_to_xyxy(ref), 32, REG_SCALE, UP)
    on_16 = torch.where(target.long() == 16, left, torch.where(target.long() == 15, right, torch.zeros(4)))
    torch.testing.assert_close(on_16, torch.ones(4), rtol=0, atol=1e-5)


def test_two_bin_targets_decode_back_to_the_target_box() -> None:
    """The expectation of a distribution holding ``left`` at the left bin and ``right`` at the next
    one is the true offset (W is linear between bins), so distance2bbox recovers the box."""
    ref = torch.tensor([[0.5, 0.5, 0.2, 0.4], [0.3, 0.6, 0.3, 0.2]])
    truth = torch.tensor([[0.55, 0.48, 0.25, 0.3], [0.31, 0.62, 0.2, 0.22]])
    target, right, left = bbox2distance(ref, xywh_to_xyxy(truth), 32, REG_SCALE, UP)
    prob = torch.zeros(8, 33)
    rows = torch.arange(8)
    prob[rows, target.long()] = left
    prob[rows, target.long() + 1] += right
    offsets = integral(prob.clamp(min=1e-30).log().reshape(2, 4 * 33), weighting_function(32, UP, REG_SCALE))
    torch.testing.assert_close(distance2bbox(ref, offsets, REG_SCALE), truth, rtol=0, atol=1e-6)


def test_offsets_past_the_last_bin_go_wholly_to_it() -> None:
    ref = torch.tensor([[0.5, 0.5, 0.02, 0.02]])
    far = torch.tensor([[0.0, 0.0, 1.0, 1.0]])  # edges 25 box-widths away: beyond W's +4
    target, right, left = bbox2distance(ref, far, 32, REG_SCALE, UP)
    assert torch.allclose(target, torch.full((4,), 31.9)) and right.tolist() == [1.0] * 4 and left.tolist() == [0.0] * 4


def _m(queries: list[int], gts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(queries, np.int64), np.array(gts, np.int64)


def test_union_keeps_each_query_once_with_the_ground_truth_most_sets_gave_it() -> None:
    sets = [[_m([0, 1], [0, 1]), _m([], [])], [_m([0, 2], [0, 1]), _m([], [])], [_m([0, 1], [1, 0]), _m([], [])]]
    (queries, gts), empty = union_matches(sets)
    # query 0: gt 0 twice, gt 1 once -> 0; query 1: gt 1 once, gt 0 once -> tie, the lower gt; query 2: gt 1.
    assert dict(zip(queries.tolist(), gts.tolist())) == {0: 0, 1: 0, 2: 1}
    assert len(empty[0]) == 0 and len(empty[1]) == 0


def test_varifocal_and_matchability_aware_terms_by_hand() -> None:
    logits = torch.tensor([[[[0.0, 2.0], [-1.0, 1.0]]]])     # one set, one image, two queries, two classes
    index = torch.tensor([[0], [0], [0], [0]])                # query 0 matched to a class-1 box
    iou, labels = torch.tensor([0.5]), torch.tensor([1])
    p = torch.sigmoid(logits)[0, 0]
    bce = lambda z, t: -(t * math.log(torch.sigmoid(torch.tensor(z)).item())  # noqa: E731
                         + (1 - t) * math.log(1 - torch.sigmoid(torch.tensor(z)).item()))
    vfl = varifocal(logits, iou, index, labels, alpha=0.75, gamma=2.0).item()
    negatives = sum(0.75 * p[q, c].item() ** 2 * bce(logits[0, 0, q, c].item(), 0.0) for q, c in ((0, 0), (1, 0), (1, 1)))
    assert vfl == pytest.approx(negatives + 0.5 * bce(2.0, 0.5), rel=1e-5)
    mal = matchability_aware(logits, iou, index, labels, gamma=1.5).item()
    negatives = sum(p[q, c].item() ** 1.5 * bce(logits[0, 0, q, c].item(), 0.0) for q, c in ((0, 0), (1, 0), (1, 1)))
    assert mal == pytest.approx(negatives + bce(2.0, 0.5**1.5), rel=1e-5)


def _outputs(batch: int = 2, queries: int = 6, nc: int = 3, layers: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random decoder training outputs (no denoising queries)."""
    g = torch.Generator().manual_seed(seed)
    bins = 4 * 33

    def boxes(*shape: int) -> torch.Tensor:
        return torch.cat((torch.rand(*shape, 2, generator=g) * 0.6 + 0.2, torch.rand(*shape, 2, generator=g) * 0.3 + 0.1), -1)

    out = {"logits": torch.randn(layers, batch, queries, nc, generator=g), "boxes": boxes(layers, batch, queries),
           "corners": torch.randn(layers, batch, queries, bins, generator=g), "refs": boxes(batch, queries),
           "pre_logits": torch.randn(batch, queries, nc, generator=g), "pre_boxes": boxes(batch, queries),
           "enc_logits": torch.randn(batch, queries, nc, generator=g), "enc_boxes": boxes(batch, queries),
           "up": UP, "reg_scale": REG_SCALE}
    for key in ("logits", "boxes", "corners"):
        out[f"dn_{key}"] = out[key][:, :, :0]
    for key in ("refs", "pre_logits", "pre_boxes"):
        out[f"dn_{key}"] = out[key][:, :0]
    for key, value in out.items():
        if key not in ("up", "reg_scale"):
            out[key] = value.clone().requires_grad_()
    return out


def _loss(outputs: dict[str, torch.Tensor], rows: torch.Tensor, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    targets = group_targets(rows, 2, 3)
    denoising = build_denoising(targets, 3, 6, num_denoising=0)
    return FDRLoss(3, GAINS)(outputs, targets, denoising, **kwargs)  # type: ignore[arg-type]


def test_without_boxes_only_background_classification_and_distillation_remain() -> None:
    outputs = _outputs()
    total, items = _loss(outputs, torch.zeros(0, 6))
    assert items[0] > 0 and items[1] == 0 and items[2] == 0 and items[3] == 0 and items[4] > 0
    total.backward()
    assert outputs["logits"].grad is not None and outputs["corners"].grad is not None


ROWS = torch.tensor([[1, 0, 0.5, 0.5, 0.2, 0.2], [1, 2, 0.5, 0.5, 0.2, 0.2],      # two identical boxes
                     [1, 1, 0.3, 0.3, 0.1, 0.2]])                                  # image 0 has none


def test_duplicate_boxes_get_distinct_queries_and_uneven_counts_train_every_term() -> None:
    outputs = _outputs()
    targets = group_targets(ROWS, 2, 3)
    logits = torch.cat((outputs["logits"], outputs["pre_logits"][None], outputs["enc_logits"][None])).detach()
    boxes = torch.cat((outputs["boxes"], outputs["pre_boxes"][None], outputs["enc_boxes"][None])).detach()
    for per_image in HungarianMatcher(log_eps=EPS_LOG)(logits, boxes, targets):
        assert len(per_image[0][0]) == 0                              # no box in image 0: no match
        queries, gts = per_image[1]
        assert sorted(gts.tolist()) == [0, 1, 2] and len(set(queries.tolist())) == 3  # 6 queries, 3 boxes
    total, items = _loss(outputs, ROWS)
    assert torch.isfinite(items).all() and (items > 0).all()
    total.backward()
    assert outputs["boxes"].grad.abs().sum() > 0 and outputs["corners"].grad.abs().sum() > 0


def test_counts_are_summed_over_ranks_in_one_call_and_divided_by_the_world_size() -> None:
    calls: list[torch.Tensor] = []

    def two_identical_ranks(local: torch.Tensor) -> torch.Tensor:
        calls.append(local.clone())
        return 2 * local

    _, alone = _loss(_outputs(), ROWS)
    _, ranked = _loss(_outputs(), ROWS, normalizer_sum=two_identical_ranks, world_size=2)
    assert len(calls) == 1 and calls[0][0] == 3 and calls[0][1] >= 3   # [boxes, union matches]
    torch.testing.assert_close(ranked, alone)   # half a batch per rank: the whole batch's loss


def test_distillation_vanishes_when_every_layer_already_agrees_with_the_last() -> None:
    outputs = _outputs()
    with torch.no_grad():
        outputs["corners"][0] = outputs["corners"][1]
    _, items = _loss(outputs, ROWS)
    assert items[4] == pytest.approx(0.0, abs=1e-6)


def test_distillation_mixes_matched_and_unmatched_queries_by_square_roots_of_their_counts() -> None:
    pos, neg = FDRLoss._mixing([_m([0, 1], [0, 1]), _m([2], [0])], torch.Size([2, 6]))
    assert pos == pytest.approx((4 * 3 * 8 / 2) ** 0.5) and neg == pytest.approx((4 * (12 - 3) * 8 / 2) ** 0.5)


def test_deimv2_late_matching_ranks_by_score_times_iou_to_the_fourth() -> None:
    """A confident loose prediction wins the weighted cost; a less confident tight one wins
    ``-p * IoU**4`` (DEIMv2's cost late in a run)."""
    truth = group_targets(torch.tensor([[0, 0, 0.5, 0.5, 0.4, 0.4]]), 1, 2)
    boxes = torch.tensor([[[[0.62, 0.5, 0.4, 0.4], [0.5, 0.5, 0.38, 0.4]]]])
    logits = torch.tensor([[[[math.log(0.9 / 0.1), -5.0], [math.log(0.3 / 0.7), -5.0]]]])
    matcher = HungarianMatcher(log_eps=EPS_LOG)
    assert matcher(logits, boxes, truth)[0][0][0].tolist() == [0]
    assert matcher(logits, boxes, truth, iou_order=4.0)[0][0][0].tolist() == [1]
    cost = matcher.cost(logits, boxes, torch.tensor([[0]]), truth.boxes[None], iou_order=4.0)[0, 0, :, 0]
    iou = torch.tensor([0.112 / 0.208, 0.152 / 0.16])   # overlaps 0.28 x 0.4 and 0.38 x 0.4 with the 0.4 x 0.4 truth
    torch.testing.assert_close(cost, -torch.tensor([0.9, 0.3]) * iou**4, rtol=1e-5, atol=1e-6)


def test_late_matching_starts_at_the_declared_share_of_the_run() -> None:
    seen: list[float | None] = []

    class Spy(HungarianMatcher):
        def __call__(self, *args: object, iou_order: float | None = None, **kw: object):  # type: ignore[override]
            seen.append(iou_order)
            return super().__call__(*args, iou_order=iou_order)  # type: ignore[arg-type]

    targets = group_targets(ROWS, 2, 3)
    loss = FDRLoss(3, {"mal": 1.0, **{k: v for k, v in GAINS.items() if k != "vfl"}}, cls_term="mal",
                   matcher=Spy(), iou_order_from=0.75)
    for progress in (0.5, 0.75):
        loss(_outputs(), targets, build_denoising(targets, 3, 6, num_denoising=0), progress=progress)
    assert seen == [None, 4.0]


def test_small_deimv2_sizes_train_without_distribution_terms() -> None:
    targets = group_targets(ROWS, 2, 3)
    loss = FDRLoss(3, {"mal": 1.0, **{k: v for k, v in GAINS.items() if k != "vfl"}}, cls_term="mal", local=False,
                   union=False)
    _, items = loss(_outputs(), targets, build_denoising(targets, 3, 6, num_denoising=0))
    assert items[3] == 0 and items[4] == 0 and (items[:3] > 0).all()


def test_fgl_weights_each_edge_by_its_two_bins_and_the_query_iou() -> None:
    """One query, one layer, matched: FGL = IoU * sum over edges of (left CE * left + right CE * right)."""
    loss = FDRLoss(1, {"vfl": 0.0, "bbox": 0.0, "giou": 0.0, "fgl": 1.0, "ddf": 0.0})
    ref = torch.tensor([[0.5, 0.5, 0.2, 0.2]])
    box = torch.tensor([[0.52, 0.5, 0.22, 0.2]])
    truth = torch.tensor([[0.5, 0.5, 0.2, 0.2]])
    corners = torch.randn(1, 1, 1, 4 * 33, generator=torch.Generator().manual_seed(3))
    index = torch.zeros(4, 1, dtype=torch.long)
    fgl, _ = loss._local(corners, box[None, None], torch.zeros(1, 1, 1, 1), ref[None], index, truth,
                         {"up": UP, "reg_scale": REG_SCALE}, (1.0, 1.0), torch.tensor(1.0))
    target, right, left = bbox2distance(ref, xywh_to_xyxy(truth), 32, REG_SCALE, UP)
    logits = corners.reshape(4, 33)
    ce = (F.cross_entropy(logits, target.long(), reduction="none") * left
          + F.cross_entropy(logits, target.long() + 1, reduction="none") * right)
    iou = 0.038 / 0.046   # overlap 0.19 x 0.2; union 0.044 + 0.04 - 0.038
    assert fgl.item() == pytest.approx(iou * ce.sum().item(), rel=1e-5)
