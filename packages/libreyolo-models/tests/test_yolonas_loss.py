"""YOLO-NAS's loss (task-aligned assignment, varifocal + GIoU + DFL) on cases worked out by hand, its
DDP scaling, and a short training run through the family that must lower it."""

from __future__ import annotations

import math

import torch
from family_steps import losses_over_steps
from rank_split import assert_two_ranks_average_to_one_process, leaves

from libreyolo_models import LibreYOLONAS
from libreyolo_models.families.yolonas.loss import YoloNasLoss

NC = 2
IMGSZ = 64  # levels 8x8, 4x4, 2x2: 84 anchors
ANCHORS = 64 + 16 + 4
LN2 = math.log(2.0)
NEG = 0.75 * 0.25 * LN2  # a negative element at logit 0: 0.75 * p^2 * BCE(0, 0)


def constant_outputs(batch: int = 1, distance: int = 1) -> list[torch.Tensor]:
    """Head maps whose class logits are 0 (p = 0.5) and whose every side puts (almost) all its mass on
    bin ``distance``: each anchor predicts a square ``2 * distance`` strides wide around its centre."""
    maps = []
    for side in (8, 4, 2):
        m = torch.zeros(batch, 68 + NC, side, side)
        for s in range(4):
            m[:, s * 17 + distance] = 30.0
        maps.append(m)
    return maps


def box(image: int, cls: int, x1: float, y1: float, x2: float, y2: float) -> list[float]:
    return [image, cls, (x1 + x2) / 2 / IMGSZ, (y1 + y2) / 2 / IMGSZ, (x2 - x1) / IMGSZ, (y2 - y1) / IMGSZ]


def test_one_box_assigns_the_five_anchors_inside_it_and_scores_them_by_hand() -> None:
    """gt (16, 16, 32, 32) px holds the centres of four stride-8 anchors (20 and 28 on each axis) and
    one stride-16 anchor (24, 24); the stride-32 centre (16, 16) is on its edge, so outside. Each
    stride-8 anchor predicts a 16 px square overlapping the gt by 12 x 12: IoU 144 / 368; the
    stride-16 one a 32 px square around it: IoU 256 / 1024. All five are positives (13 allowed)."""
    iou0, iou1 = 144 / 368, 0.25
    q0, q1 = iou0, iou0 * (iou1 / iou0) ** 6  # alignment p * IoU^6, rescaled to the best IoU
    n = 4 * q0 + q1
    giou0 = iou0 - (400 - 368) / 400  # enclosing box (12, 12, 32, 32)
    giou1 = iou1  # the prediction encloses the gt
    # Every side's target is 0.5 or 1.5 grid units from its anchor: half its mass is missing from a
    # neighbouring bin whose log-probability is -30, so the DFL of each side is 15.
    expected = torch.tensor([
        LN2 * n + (ANCHORS * NC - 5) * NEG,        # cls: positives weigh q * BCE(0, q) = q ln 2
        2.5 * (4 * q0 * (1 - giou0) + q1 * (1 - giou1)),
        0.5 * 15 * n,
    ]) / n
    loss, items = YoloNasLoss(NC)(constant_outputs(), torch.tensor([box(0, 1, 16, 16, 32, 32)]))
    torch.testing.assert_close(items, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, expected.sum(), rtol=1e-5, atol=1e-6)


def test_duplicate_boxes_give_the_loss_of_one() -> None:
    """Both copies claim the same anchors; each anchor keeps one (the first on equal IoU), so the
    targets and the normaliser are those of a single box."""
    loss_fn = YoloNasLoss(NC)
    one = loss_fn(constant_outputs(), torch.tensor([box(0, 1, 16, 16, 32, 32)]))[1]
    two = loss_fn(constant_outputs(), torch.tensor([box(0, 1, 16, 16, 32, 32)] * 2))[1]
    torch.testing.assert_close(two, one)


def test_no_boxes_leaves_only_the_background_class_term_and_every_output_gets_a_gradient() -> None:
    outputs = leaves(constant_outputs(batch=2))
    loss, items = YoloNasLoss(NC)(outputs, torch.zeros(0, 6))
    torch.testing.assert_close(items, torch.tensor([2 * ANCHORS * NC * NEG, 0.0, 0.0]))  # normaliser clamped to 1
    loss.backward()
    assert all(o.grad is not None and torch.isfinite(o.grad).all() for o in outputs)


def test_an_image_without_boxes_adds_only_background_to_its_batch() -> None:
    """Counts per image differ (three boxes, none): the batch's terms are the first image's plus the
    second's background class term, over the first image's normaliser."""
    boxes = torch.tensor([box(0, 0, 16, 16, 32, 32), box(0, 1, 30, 8, 60, 40), box(0, 0, 2, 40, 20, 62)])
    loss_fn = YoloNasLoss(NC)
    normalisers: list[torch.Tensor] = []
    alone = loss_fn(constant_outputs(), boxes, normalizer_sum=lambda n: normalisers.append(n) or n)[1]
    together = loss_fn(constant_outputs(batch=2), boxes)[1]
    assert normalisers[0] > 1  # three boxes' soft targets
    expected = alone + torch.tensor([ANCHORS * NC * NEG / normalisers[0].item(), 0.0, 0.0])
    torch.testing.assert_close(together, expected, rtol=1e-5, atol=1e-6)


def test_two_ranks_average_to_the_one_process_loss() -> None:
    torch.manual_seed(0)
    full = leaves([m + 0.3 * torch.randn_like(m) for m in constant_outputs(batch=4, distance=2)])
    targets = torch.tensor([box(0, 0, 8, 8, 40, 40), box(0, 1, 30, 20, 62, 60), box(1, 1, 4, 4, 60, 30),
                            box(1, 0, 20, 30, 50, 62), box(2, 0, 10, 10, 50, 50), box(3, 1, 0, 20, 30, 60)])
    assert_two_ranks_average_to_one_process(YoloNasLoss(NC), full, targets, background_rank=False)
    assert_two_ranks_average_to_one_process(YoloNasLoss(NC), leaves(full), targets[:4], background_rank=True)


def test_loss_falls_over_twenty_steps_through_the_family() -> None:
    """YOLO-NAS-s at 64 px, batch 2, AdamW: the family's seams and loss learn a fixed batch."""
    torch.manual_seed(0)
    model = LibreYOLONAS(size="s", nc=3, imgsz=IMGSZ)
    images = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([box(0, 0, 8, 8, 30, 30), box(0, 1, 36, 20, 60, 50), box(1, 2, 10, 12, 54, 58)])
    optimizer = torch.optim.AdamW([p for p in model.net.parameters() if p.requires_grad], lr=1e-3)
    losses = losses_over_steps(model, images, targets, optimizer)
    assert max(losses[-3:]) < 0.5 * losses[0], losses
