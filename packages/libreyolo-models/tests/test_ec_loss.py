"""EC's loss on hand-worked cases: the FDR bins and their targets, GO-LSD's match union, the MAL
class term, a batch without boxes, denoising matches, and the normalisation across ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from libreyolo_models.families.ec.fdr import bbox2distance, distance2bbox, weighting_function
from libreyolo_models.families.ec.loss import ECLoss, union_matches
from libreyolo_models.layers.detr.denoising import build_denoising
from libreyolo_models.layers.set_targets import group_targets

GAINS = {"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5}
UP, REG_SCALE = torch.tensor([0.5]), torch.tensor([4.0])


def targets(rows: list[tuple[float, ...]], batch: int, nc: int = 3):  # noqa: ANN201 - GroupedTargets
    return group_targets(torch.tensor(rows, dtype=torch.float32).reshape(-1, 6), batch, nc)


def synthetic_outputs(batch: int, queries: int = 6, nc: int = 3, layers: int = 2, dn: int = 0, seed: int = 0,
                      boxes: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Training outputs of the decoder's shape (leaves require grad); ``boxes`` fixes every layer's."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {"up": UP, "reg_scale": REG_SCALE}
    for prefix, n in (("", queries), ("dn_", dn)):
        out[prefix + "logits"] = torch.randn(layers, batch, n, nc, generator=g)
        out[prefix + "boxes"] = (torch.rand(layers, batch, n, 4, generator=g) * 0.4 + 0.3 if boxes is None or prefix
                                 else boxes.expand(layers, -1, -1, -1).clone())
        out[prefix + "corners"] = torch.randn(layers, batch, n, 4 * 33, generator=g)
        out[prefix + "refs"] = torch.rand(layers, batch, n, 4, generator=g) * 0.4 + 0.3
        out[prefix + "pre_logits"] = torch.randn(batch, n, nc, generator=g)
        out[prefix + "pre_boxes"] = torch.rand(batch, n, 4, generator=g) * 0.4 + 0.3
    out["enc_logits"] = torch.randn(batch, queries, nc, generator=g)
    out["enc_boxes"] = torch.rand(batch, queries, 4, generator=g) * 0.4 + 0.3
    return {k: v.requires_grad_(k not in ("up", "reg_scale")) for k, v in out.items()}


def test_bins_span_twice_up_times_reg_scale_and_are_symmetric() -> None:
    w = weighting_function(32, UP, REG_SCALE)
    assert w.shape == (33,) and w[0].item() == -4.0 and w[16].item() == 0.0 and w[32].item() == 4.0
    torch.testing.assert_close(w, -w.flip(0))
    step = 3.0 ** (2 / 30)  # (|up| * |reg_scale| + 1) ** (2 / (reg_max - 2))
    assert w[17].item() == pytest.approx(step - 1, rel=1e-6) and w[31].item() == pytest.approx(step**15 - 1, rel=1e-5)


def test_a_box_equal_to_its_reference_targets_the_zero_bin_and_decodes_back() -> None:
    ref = torch.tensor([[0.5, 0.5, 0.25, 0.5]])  # binary fractions: the edges land exactly on bin 16
    index, right, left = bbox2distance(ref, torch.tensor([[0.375, 0.25, 0.625, 0.75]]), 32, REG_SCALE, UP)
    assert index.tolist() == [16.0] * 4 and right.tolist() == [0.0] * 4 and left.tolist() == [1.0] * 4
    torch.testing.assert_close(distance2bbox(ref, torch.zeros(1, 4), REG_SCALE), ref)


def test_an_edge_beyond_the_last_bin_goes_wholly_to_it() -> None:
    index, right, left = bbox2distance(torch.tensor([[0.5, 0.5, 0.01, 0.01]]), torch.tensor([[0.0, 0.0, 1.0, 1.0]]),
                                       32, REG_SCALE, UP)
    assert index.tolist() == pytest.approx([31.9] * 4) and right.tolist() == [1.0] * 4 and left.tolist() == [0.0] * 4


def test_union_keeps_each_querys_most_frequent_ground_truth() -> None:
    m = [[(np.array([0, 1]), np.array([0, 1]))], [(np.array([0, 2]), np.array([0, 1]))], [(np.array([0]), np.array([1]))]]
    (queries, truths), = union_matches(m)
    assert dict(zip(queries.tolist(), truths.tolist())) == {0: 0, 1: 1, 2: 1}
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    (q, g), = union_matches([[empty], [empty]])
    assert len(q) == len(g) == 0


def test_mal_on_an_exact_box_is_bce_to_one_plus_focal_negatives() -> None:
    """IoU 1: the matched class's target is 1**2 = 1 (weight 1); others are negatives weighted by
    p**2 (detached): ``p**2 * -log(1 - p)``."""
    x = torch.tensor([[[0.4, -0.7, 1.1]]])
    box = torch.tensor([[[0.5, 0.5, 0.2, 0.2]]])
    gt = targets([(0, 2, 0.5, 0.5, 0.2, 0.2)], 1)
    from libreyolo_models.families.ec.loss import _Context, index_of

    ctx = _Context(gt.labels, gt.boxes, REG_SCALE, UP)
    value = ECLoss(GAINS).mal(x, box, index_of([(np.array([0]), np.array([0]))], [0], torch.device("cpu")), ctx)
    p = x.sigmoid()[0, 0]
    expected = -torch.log(p[2]) + sum(p[c] ** 2 * -torch.log(1 - p[c]) for c in (0, 1))
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)


def test_a_batch_without_boxes_has_only_the_class_term_and_reaches_every_output() -> None:
    out = synthetic_outputs(2)
    empty = build_denoising(targets([], 2), 3, 6)
    total, items = ECLoss(GAINS)(out, targets([], 2), empty)
    total.backward()
    assert torch.isfinite(total) and items[0] > 0 and items[1:4].abs().sum() == 0
    # Every output the network differentiates through reaches the loss (the references are
    # detached in the network too: layer 0's coarse boxes, fixed for the later layers).
    assert [k for k, v in out.items() if v.requires_grad and v.grad is None] == ["refs", "dn_refs"]


def test_denoising_copies_supervise_their_own_ground_truth() -> None:
    """Positive denoising slots placed exactly on their boxes cost no box loss; the negatives do not
    count as matches."""
    gt = targets([(0, 1, 0.3, 0.4, 0.2, 0.2), (1, 0, 0.6, 0.6, 0.3, 0.2), (1, 2, 0.7, 0.3, 0.1, 0.1)], 2)
    torch.manual_seed(0)
    dn = build_denoising(gt, 3, 6, num_denoising=8)
    assert (dn.groups, dn.max_boxes, dn.num_queries) == (4, 2, 16)
    assert dn.positive_slots(1).tolist() == [0, 1, 4, 5, 8, 9, 12, 13]
    out = synthetic_outputs(2, dn=dn.num_queries)
    with torch.no_grad():
        for b, n in enumerate(dn.counts):
            slots = dn.positive_slots(b)
            out["dn_boxes"][:, b, slots] = gt.boxes[gt.offsets()[b]:gt.offsets()[b] + n].repeat(dn.groups, 1)
            out["dn_pre_boxes"][b, slots] = gt.boxes[gt.offsets()[b]:gt.offsets()[b] + n].repeat(dn.groups, 1)
    loss = ECLoss(GAINS)
    with_dn = loss(out, gt, dn)[1]
    without = loss(out, gt, build_denoising(gt, 3, 6, num_denoising=0))[1]
    torch.testing.assert_close(with_dn[1:3], without[1:3])  # the exact denoising boxes add nothing
    assert with_dn[0] > without[0]                            # their class terms do add


def test_two_ranks_at_half_the_batch_give_the_class_and_box_terms_of_one_process() -> None:
    """DDF is a per-rank mean (upstream's too); the other terms are sums over N (boxes) and the
    union's pairs, summed over ranks."""
    rows = [(0, 0, 0.3, 0.3, 0.2, 0.2), (1, 1, 0.6, 0.5, 0.3, 0.2), (1, 2, 0.4, 0.7, 0.1, 0.2)]
    whole_out = synthetic_outputs(2, seed=1)
    no_dn = build_denoising(targets(rows, 2), 3, 6, num_denoising=0)
    loss = ECLoss(GAINS)
    _, whole = loss(whole_out, targets(rows, 2), no_dn)
    go_pairs = []
    for image in (0, 1):  # the union's pair count per image, from a one-image run each
        part = {k: (v[:, image:image + 1] if v.dim() == 4 else v[image:image + 1] if v.dim() == 3 else v)
                for k, v in whole_out.items()}
        mine = [(0.0, *r[1:]) for r in rows if r[0] == image]
        matched = loss.matcher(torch.cat((part["logits"], part["pre_logits"][None], part["enc_logits"][None])).detach(),
                               torch.cat((part["boxes"], part["pre_boxes"][None], part["enc_boxes"][None])).detach(),
                               targets(mine, 1))
        go_pairs.append(len(union_matches([matched[1], matched[0], *matched[2:]])[0][0]))
    totals = torch.tensor([3.0, float(sum(go_pairs))])
    halves = []
    for image in (0, 1):
        part = {k: (v[:, image:image + 1] if v.dim() == 4 else v[image:image + 1] if v.dim() == 3 else v)
                for k, v in whole_out.items()}
        mine = [(0.0, *r[1:]) for r in rows if r[0] == image]
        halves.append(loss(part, targets(mine, 1), build_denoising(targets(mine, 1), 3, 6, num_denoising=0),
                           normalizer_sum=lambda local: totals, world_size=2)[1])
    torch.testing.assert_close((halves[0][:4] + halves[1][:4]) / 2, whole[:4], rtol=1e-5, atol=1e-6)
    assert math.isfinite(whole[4].item())


def test_mal_is_plain_bce_where_nothing_is_matched() -> None:
    logits = torch.randn(1, 4, 3)
    gt = targets([], 1)
    from libreyolo_models.families.ec.loss import _Context, index_of

    ctx = _Context(gt.labels, gt.boxes, REG_SCALE, UP)
    value = ECLoss(GAINS).mal(logits, torch.rand(1, 4, 4), index_of([(np.zeros(0, np.int64),) * 2], [0],
                                                                    torch.device("cpu")), ctx)
    expected = (logits.sigmoid() ** 2 * F.softplus(logits)).sum()
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
