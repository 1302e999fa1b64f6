"""RT-DETR's contrastive denoising groups for batches with 0, 1 and many boxes per image: layout,
noise bounds, label flips, the attention mask, and the decoder consuming them."""

from __future__ import annotations

import pytest
import torch

from libreyolo_models.layers.boxes import xywh_to_xyxy
from libreyolo_models.layers.detr.anchors import inverse_sigmoid
from libreyolo_models.layers.detr.denoising import build_denoising
from libreyolo_models.layers.set_targets import group_targets

NC, Q = 4, 10


def _grouped(rows: list[tuple], batch: int):  # noqa: ANN202
    return group_targets(torch.tensor(rows, dtype=torch.float32).reshape(-1, 6), batch, NC)


def test_a_batch_without_boxes_has_no_denoising_queries() -> None:
    dn = build_denoising(_grouped([], 3), NC, Q)
    assert dn.num_queries == 0 and dn.groups == 0 and dn.attn_mask is None
    assert dn.labels.shape == (3, 0) and dn.boxes_unact.shape == (3, 0, 4)


def test_one_box_in_the_batch_fills_a_hundred_groups_of_two() -> None:
    dn = build_denoising(_grouped([(1, 2, 0.5, 0.5, 0.2, 0.2)], 2), NC, Q, generator=torch.Generator().manual_seed(0))
    assert (dn.groups, dn.max_boxes, dn.num_queries) == (100, 1, 200)
    assert dn.positive_slots(1).tolist() == list(range(0, 200, 2))
    assert dn.positive_slots(0).numel() == 0
    assert (dn.labels[0] == NC).all()  # the image without a box holds padding only
    assert dn.attn_mask.shape == (200 + Q, 200 + Q)


def test_many_boxes_per_image_layout_and_order_follow_the_grouped_targets() -> None:
    rows = [(2, 1, 0.2, 0.2, 0.1, 0.1), (0, 3, 0.5, 0.5, 0.1, 0.1), (2, 0, 0.7, 0.3, 0.1, 0.1),
            (0, 2, 0.4, 0.6, 0.1, 0.1), (2, 2, 0.3, 0.8, 0.1, 0.1), (2, 1, 0.6, 0.6, 0.1, 0.1)]
    grouped = _grouped(rows, 3)
    assert grouped.counts == (2, 0, 4)
    assert grouped.labels.tolist() == [3, 2, 1, 0, 2, 1]  # per image, in row order
    dn = build_denoising(grouped, NC, Q, label_noise_ratio=0.0, box_noise_scale=0.0)
    assert (dn.groups, dn.max_boxes, dn.num_queries) == (25, 4, 200)
    slots = dn.positive_slots(2)
    assert slots[:8].tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    # Without noise, positive and negative copies of each group hold the ground truth itself.
    for g in (0, 24):
        base = g * 8
        assert dn.labels[2, base:base + 4].tolist() == [1, 0, 2, 1] == dn.labels[2, base + 4:base + 8].tolist()
        assert dn.labels[0, base:base + 4].tolist() == [3, 2, NC, NC]
    torch.testing.assert_close(dn.boxes_unact[2, 8:12].sigmoid(), grouped.boxes[2:6], atol=1e-6, rtol=0)


def test_positive_copies_move_less_than_half_an_extent_and_negative_ones_more() -> None:
    rows = [(0, 0, 0.5, 0.5, 0.1, 0.2), (0, 1, 0.3, 0.4, 0.08, 0.06), (1, 2, 0.6, 0.5, 0.12, 0.1)]
    grouped = _grouped(rows, 2)
    dn = build_denoising(grouped, NC, Q, label_noise_ratio=0.0, generator=torch.Generator().manual_seed(1))
    truth = xywh_to_xyxy(grouped.boxes)
    half = grouped.boxes[:, 2:].repeat(1, 2) / 2
    noised = xywh_to_xyxy(dn.boxes_unact.sigmoid())
    m, flipped = dn.max_boxes, 0
    for image, first in ((0, 0), (1, 2)):
        n = grouped.counts[image]
        for g in range(dn.groups):
            for j in range(n):
                pos = (noised[image, g * 2 * m + j] - truth[first + j]).abs() / half[first + j]
                assert (pos <= 1 + 1e-3).all()
                neg_box = noised[image, g * 2 * m + m + j]
                if (neg_box[2:] - neg_box[:2]).min() < 1e-3:
                    flipped += 1  # corners crossed: the width is clipped to ~0 in logit space (upstream too)
                    continue
                neg = (neg_box - truth[first + j]).abs() / half[first + j]
                assert (neg >= 1 - 1e-3).all() and (neg <= 2 + 1e-3).all()
    # Corners cross when the left one moves right and the right one left (1/4 per axis): 7/16.
    assert 0.3 < flipped / (3 * dn.groups) < 0.6


def test_labels_flip_at_a_quarter_of_present_slots_and_never_on_padding() -> None:
    rows = [(0, 1, 0.5, 0.5, 0.2, 0.2)] * 5 + [(1, 1, 0.5, 0.5, 0.2, 0.2)]
    dn = build_denoising(_grouped(rows, 2), NC, Q, num_denoising=1000, generator=torch.Generator().manual_seed(0))
    present = dn.labels[0]
    changed = (present != 1).float().mean().item()
    assert 0.14 < changed < 0.24  # flip with p = 0.25 to one of 4 classes, 1 of which is the same
    padding = dn.labels[1].view(dn.groups, 2, dn.max_boxes)[:, :, 1:]
    assert (padding == NC).all()


def test_attention_mask_isolates_groups_and_hides_them_from_the_matching_queries() -> None:
    dn = build_denoising(_grouped([(0, 0, 0.5, 0.5, 0.2, 0.2), (0, 1, 0.2, 0.2, 0.1, 0.1)], 1), NC, Q,
                         num_denoising=6)
    mask, d = dn.attn_mask, dn.num_queries
    assert (dn.groups, d) == (3, 12)
    assert mask[d:, :d].all() and not mask[d:, d:].any()  # matching queries see each other only
    assert not mask[:d, d:].any()                         # groups may look at the matching queries
    for g in range(3):
        rows = slice(4 * g, 4 * g + 4)
        assert not mask[rows, 4 * g:4 * g + 4].any()
        others = torch.ones(d, dtype=torch.bool)
        others[4 * g:4 * g + 4] = False
        assert mask[rows][:, :d][:, others].all()


@pytest.fixture(scope="module")
def r18():  # noqa: ANN201
    from libreyolo_models.families.rtdetr.nn import RTDETRNet

    torch.manual_seed(0)
    return RTDETRNet("r18", nc=NC)


@pytest.mark.parametrize("rows", [[], [(0, 1, 0.5, 0.5, 0.3, 0.3)], [(i % 2, i % 3, 0.5, 0.5, 0.2, 0.2) for i in range(7)]],
                         ids=["no_box", "one_box", "many_boxes"])
def test_the_decoder_runs_with_each_layout_and_splits_its_outputs(r18, rows: list[tuple]) -> None:  # noqa: ANN001
    net = r18.train()
    grouped = _grouped(rows, 2)
    dn = build_denoising(grouped, NC, 300)
    out = net.forward_train(net.features(torch.rand(2, 3, 128, 128)), dn)
    d = dn.num_queries
    assert out["logits"].shape == (3, 2, 300, NC) and out["boxes"].shape == (3, 2, 300, 4)
    assert out["dn_logits"].shape == (3, 2, d, NC) and out["dn_boxes"].shape == (3, 2, d, 4)
    assert out["enc_logits"].shape == (2, 300, NC)
    # The matching queries cannot see the denoising ones: their outputs equal a run without them.
    empty = build_denoising(_grouped([], 2), NC, 300)
    net.eval()  # BatchNorm statistics fixed, so both runs see the same features
    with torch.no_grad():
        feats = net.features(torch.rand(2, 3, 128, 128))
        alone = net.forward_train(feats, empty)
        mixed = net.forward_train(feats, dn)
    torch.testing.assert_close(mixed["logits"], alone["logits"], atol=1e-4, rtol=1e-4)


def test_inverse_sigmoid_is_finite_on_the_border() -> None:
    x = torch.tensor([0.0, 1.0, 0.5])
    assert torch.isfinite(inverse_sigmoid(x)).all() and inverse_sigmoid(x)[2] == 0
