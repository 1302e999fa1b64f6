"""Element-wise quality losses shared by YOLO-NAS and PicoDet (``layers/dense_losses.py``), against
values worked out by hand."""

from __future__ import annotations

import math

import torch

from libreyolo_models.layers.anchors import boxes_to_distances
from libreyolo_models.layers.boxes import aligned_giou
from libreyolo_models.layers.dense_losses import distribution_focal_loss, varifocal_loss


def _bce(logit: float, target: float) -> float:
    p = 1 / (1 + math.exp(-logit))
    return -(target * math.log(p) + (1 - target) * math.log(1 - p))


def test_varifocal_weighs_positives_by_their_target_and_negatives_focally() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.0]])
    target = torch.tensor([[0.6, 0.0, 0.0]])
    positive = torch.tensor([[True, False, False]])
    got = varifocal_loss(logits, target, positive)
    p1, p2 = 1 / (1 + math.exp(1.0)), 0.5
    expected = [0.6 * _bce(2.0, 0.6), 0.75 * p1**2 * _bce(-1.0, 0.0), 0.75 * p2**2 * _bce(0.0, 0.0)]
    torch.testing.assert_close(got, torch.tensor([expected]), rtol=1e-6, atol=0)


def test_varifocal_gradient_flows_through_its_weight() -> None:
    """Upstream (PP-YOLOE, mmdetection's VFL) does not detach the focal weight; neither do we."""
    logits = torch.tensor([0.3], requires_grad=True)
    varifocal_loss(logits, torch.zeros(1), torch.zeros(1, dtype=torch.bool)).sum().backward()
    p = torch.sigmoid(torch.tensor(0.3)).item()
    # d/dx [0.75 p^2 softplus(x)] = 0.75 (2 p^2 (1 - p) softplus(x) + p^2 p)
    expected = 0.75 * (2 * p * p * (1 - p) * math.log1p(math.exp(0.3)) + p**3)
    assert logits.grad is not None
    assert abs(logits.grad.item() - expected) < 1e-6


def test_distribution_focal_loss_splits_the_target_between_its_two_bins() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5], [3.0, 0.0, 0.0, 0.0]])
    target = torch.tensor([1.25, 0.0])
    log_p = logits.log_softmax(-1)
    expected = torch.stack((-(0.75 * log_p[0, 1] + 0.25 * log_p[0, 2]), -log_p[1, 0]))
    torch.testing.assert_close(distribution_focal_loss(logits, target), expected)
    # Minimal where the distribution puts 0.75 / 0.25 on bins 1 / 2 (the expectation equals the target).
    best = torch.log(torch.tensor([1e-9, 0.75, 0.25, 1e-9]))
    worse = torch.log(torch.tensor([1e-9, 0.5, 0.5, 1e-9]))
    assert distribution_focal_loss(best, torch.tensor(1.25)) < distribution_focal_loss(worse, torch.tensor(1.25))


def test_distance_targets_stop_below_the_last_bin() -> None:
    anchors = torch.tensor([[5.0, 5.0]])
    far = torch.tensor([[-20.0, 4.0, 6.5, 30.0]])
    torch.testing.assert_close(boxes_to_distances(anchors, far, 7), torch.tensor([[6.99, 1.0, 1.5, 6.99]]))
    torch.testing.assert_close(boxes_to_distances(anchors, far, 7, eps=0.1), torch.tensor([[6.9, 1.0, 1.5, 6.9]]))


def test_giou_of_disjoint_and_nested_boxes() -> None:
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 4.0, 4.0]])
    b = torch.tensor([[3.0, 0.0, 5.0, 2.0], [1.0, 1.0, 3.0, 3.0]])
    # Disjoint: IoU 0, enclosing 5 x 2 = 10, union 8 -> -0.2. Nested: IoU 4 / 16, enclosure = union.
    torch.testing.assert_close(aligned_giou(a, b), torch.tensor([-0.2, 0.25]))
    assert aligned_giou(a * 8, b * 8).sub(aligned_giou(a, b)).abs().max() < 1e-6  # scale-free
