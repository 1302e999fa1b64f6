"""AlignOTA (``layers/align_ota.py``, DAMO-YOLO's assigner): hand-worked cases, and the batched
version against a per-image loop written from upstream's description (tinyvision/DAMO-YOLO's
``AlignOTAAssigner``, as upstream LibreYOLO ports it)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo_models.errors import ConfigError
from libreyolo_models.layers.align_ota import AlignOTAAssigner

# A 32 x 32 image at stride 8: priors at the 16 cell corners (0, 8, 16, 24) on each axis.
YS, XS = torch.meshgrid(torch.arange(4.0) * 8, torch.arange(4.0) * 8, indexing="ij")
PRIORS = torch.stack((XS.flatten(), YS.flatten()), 1)
STRIDES = torch.full((16,), 8.0)
FAR = torch.tensor([100.0, 100.0, 110.0, 110.0])


def _assign(pred_boxes: torch.Tensor, gt_boxes: torch.Tensor, labels: list[int], scores: float = 0.5,
            mask: torch.Tensor | None = None) -> object:
    g = gt_boxes.shape[0]
    return AlignOTAAssigner()(torch.full((1, 16, 2), scores), pred_boxes[None], PRIORS, STRIDES,
                              torch.tensor([labels]), gt_boxes[None],
                              torch.ones(1, g, dtype=torch.bool) if mask is None else mask)


def test_one_box_takes_dynamic_k_cheapest_inside_priors_with_iou_targets() -> None:
    gt = torch.tensor([[4.0, 4.0, 20.0, 20.0]])  # strictly holds priors (8,8) (16,8) (8,16) (16,16)
    pred = FAR.repeat(16, 1)
    pred[5] = gt[0]                               # prior (8, 8): a perfect box, IoU 1
    pred[10] = torch.tensor([4.0, 4.0, 20.0, 12.0])  # prior (16, 16): IoU 0.5
    out = _assign(pred, gt, [1])
    # k = int(1 + 0.5) = 1: only the cheapest, the perfect box.
    assert out.foreground[0].nonzero().flatten().tolist() == [5]
    assert out.labels[0, 5] == 1 and out.ious[0, 5] == pytest.approx(1.0)
    torch.testing.assert_close(out.boxes[0, 5], gt[0])


def test_dynamic_k_grows_with_the_ious_and_prefers_priors_inside_box_and_centre() -> None:
    gt = torch.tensor([[4.0, 4.0, 20.0, 20.0]])
    pred = gt.repeat(16, 1)  # every prior predicts the box exactly: IoU 1 everywhere, k = 10
    out = _assign(pred, gt, [0])
    # Ten positives; the four inside both regions first (no 1e8 penalty), then six penalised ones.
    assert out.foreground.sum() == 10
    assert out.foreground[0, [5, 6, 9, 10]].all()


def test_a_prior_claimed_by_two_boxes_goes_to_the_cheaper_one() -> None:
    gt = torch.tensor([[4.0, 4.0, 20.0, 20.0], [6.0, 6.0, 22.0, 22.0]])
    pred = FAR.repeat(16, 1)
    pred[5] = torch.tensor([5.0, 5.0, 21.0, 21.0])  # IoU 0.78 with both; each takes k = 1: prior 5
    out = _assign(pred, gt, [0, 1])
    assert out.foreground[0].nonzero().flatten().tolist() == [5]
    pred[5] = torch.tensor([5.5, 5.5, 21.5, 21.5])  # now nearer the second box
    assert _assign(pred, gt, [0, 1]).gt_index[0, 5] == 1


def test_no_boxes_padding_and_a_box_without_candidates_assign_nothing() -> None:
    pred = FAR.repeat(16, 1)
    assert not _assign(pred, torch.zeros(0, 4), []).foreground.any()
    masked = _assign(pred, torch.tensor([[4.0, 4.0, 20.0, 20.0]]), [0], mask=torch.zeros(1, 1, dtype=torch.bool))
    assert not masked.foreground.any()
    # Far outside the image and more than 2.5 strides from every prior: no candidate, no positive.
    outside = _assign(pred, torch.tensor([[300.0, 300.0, 310.0, 310.0]]), [0])
    assert not outside.foreground.any()


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="center_radius=0"):
        AlignOTAAssigner(center_radius=0)
    with pytest.raises(ConfigError, match="candidate_topk=0"):
        AlignOTAAssigner(candidate_topk=0)


def _reference(scores, priors, strides, pred, gts, labels):  # noqa: ANN001, ANN202 - test oracle
    """One image, upstream's steps literally: valid priors, pairwise costs, top-k per gt, conflicts."""
    n = pred.shape[0]
    gt_of = torch.full((n,), -1, dtype=torch.long)
    iou_of = torch.zeros(n)
    if len(gts) == 0:
        return gt_of, iou_of
    x, y = priors[:, 0:1], priors[:, 1:2]
    in_box = torch.stack((x - gts[:, 0], y - gts[:, 1], gts[:, 2] - x, gts[:, 3] - y), 1).min(1).values > 0
    cx, cy = (gts[:, 0] + gts[:, 2]) / 2, (gts[:, 1] + gts[:, 3]) / 2
    r = 2.5 * strides[:, None]
    in_ctr = torch.stack((x - (cx - r), y - (cy - r), (cx + r) - x, (cy + r) - y), 1).min(1).values > 0
    valid = (in_box | in_ctr).any(1)
    if not valid.any():
        return gt_of, iou_of
    idx = valid.nonzero().flatten()
    vp = pred[idx]
    lt = torch.maximum(vp[:, None, :2], gts[None, :, :2])
    rb = torch.minimum(vp[:, None, 2:], gts[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    iou = inter / (area(vp)[:, None] + area(gts)[None] - inter).clamp(min=1e-6)
    soft = F.one_hot(labels, scores.shape[1]).float()[None] * iou[..., None]
    p = scores[idx][:, None].expand_as(soft)
    cls_cost = (F.binary_cross_entropy(p, soft, reduction="none") * (soft - p).abs().pow(2)).sum(-1)
    cost = cls_cost + 3 * -torch.log(iou + 1e-7) + 1e8 * ~(in_box & in_ctr)[idx]
    ks = iou.topk(min(10, len(idx)), 0).values.sum(0).int().clamp(min=1)
    match = torch.zeros_like(cost)
    for g in range(len(gts)):
        match[cost[:, g].topk(int(ks[g]), largest=False).indices, g] = 1
    multi = match.sum(1) > 1
    if multi.any():
        match[multi] = 0
        match[multi, cost[multi].argmin(1)] = 1
    fg = match.sum(1) > 0
    gt_of[idx[fg]] = match[fg].argmax(1)
    iou_of[idx[fg]] = (match * iou).sum(1)[fg]
    return gt_of, iou_of


@pytest.mark.parametrize("counts", [(0, 3), (1, 1), (5, 0), (7, 2)])
def test_batched_assignment_equals_the_per_image_loop(counts: tuple[int, int]) -> None:
    gen = torch.Generator().manual_seed(sum(counts))
    ys, xs = torch.meshgrid(torch.arange(8.0) * 8, torch.arange(8.0) * 8, indexing="ij")
    priors = torch.cat((torch.stack((xs.flatten(), ys.flatten()), 1), torch.stack(torch.meshgrid(
        torch.arange(4.0) * 16, torch.arange(4.0) * 16, indexing="xy"), -1).reshape(-1, 2)))
    strides = torch.cat((torch.full((64,), 8.0), torch.full((16,), 16.0)))
    b, a, nc, g = 2, priors.shape[0], 3, max(counts)
    scores = torch.rand(b, a, nc, generator=gen) * 0.9 + 0.05
    centre = priors[None] + torch.rand(b, a, 2, generator=gen) * 16 - 8
    half = torch.rand(b, a, 2, generator=gen) * 12 + 2
    pred = torch.cat((centre - half, centre + half), -1)
    gt_c = torch.rand(b, g, 2, generator=gen) * 48 + 8
    gt_h = torch.rand(b, g, 2, generator=gen) * 10 + 3
    gts = torch.cat((gt_c - gt_h, gt_c + gt_h), -1)
    labels = torch.randint(0, nc, (b, g), generator=gen)
    mask = torch.arange(g)[None] < torch.tensor(counts)[:, None]
    out = AlignOTAAssigner()(scores, pred, priors, strides, labels, gts, mask)
    for i, n in enumerate(counts):
        gt_of, iou_of = _reference(scores[i], priors, strides, pred[i], gts[i, :n], labels[i, :n])
        assert torch.equal(out.foreground[i], gt_of >= 0)
        assert torch.equal(out.gt_index[i][gt_of >= 0], gt_of[gt_of >= 0])
        torch.testing.assert_close(out.ious[i], iou_of, rtol=1e-5, atol=1e-6)
