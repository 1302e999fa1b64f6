"""PicoDet's loss (SimOTA in its box-or-centre geometry, varifocal + GIoU + DFL) on cases worked out by
hand, its DDP scaling (two normalisers in one all-reduce), and a short training run through the
family that must lower it."""

from __future__ import annotations

import math

import pytest
import torch
from family_steps import losses_over_steps
from rank_split import assert_two_ranks_average_to_one_process, leaves

from libreyolo_models import LibrePICODET
from libreyolo_models.families.picodet.loss import PicoDetLoss
from libreyolo_models.layers.boxes import xyxy_to_xywh
from libreyolo_models.layers.simota import SimOTAAssigner

NC = 2
IMGSZ = 64  # levels 8x8, 4x4, 2x2, 1x1 (strides 8, 16, 32, 64): 85 anchors
ANCHORS = 64 + 16 + 4 + 1
LN2 = math.log(2.0)
NEG = 0.75 * 0.25 * LN2  # a negative element at logit 0: 0.75 * p^2 * BCE(0, 0)


def constant_outputs(batch: int = 1, distance: int = 1) -> list[torch.Tensor]:
    """Head maps with class logits 0 (p = 0.5) whose every side puts (almost) all its mass on bin
    ``distance``: each anchor predicts a square ``2 * distance`` strides wide around its centre."""
    maps = []
    for side in (8, 4, 2, 1):
        m = torch.zeros(batch, NC + 32, side, side)
        for s in range(4):
            m[:, NC + s * 8 + distance] = 30.0
        maps.append(m)
    return maps


def box(image: int, cls: int, x1: float, y1: float, x2: float, y2: float) -> list[float]:
    return [image, cls, (x1 + x2) / 2 / IMGSZ, (y1 + y2) / 2 / IMGSZ, (x2 - x1) / IMGSZ, (y2 - y1) / IMGSZ]


GT = (13.0, 17.0, 31.0, 34.0)


def test_one_box_takes_its_two_best_overlapping_anchors_and_scores_them_by_hand() -> None:
    """gt (13, 17, 31, 34): 46 anchors lie in its box or within 2.5 strides of its centre (22, 25.5),
    five in both (stride-8 centres 20 and 28 on each axis, the stride-16 centre (24, 24)). Each
    anchor predicts a square of 2 strides; the ten best IoUs sum to 2.84, so k = 2: the two
    cheapest (every class cost is equal at p = 0.5) are the best-overlapping ones, anchor 26 =
    (20, 28) with IoU 210 / 352 and anchor 18 = (20, 20) with IoU 165 / 397."""
    iou26, iou18 = 210 / 352, 165 / 397
    giou26 = iou26 - (361 - 352) / 361  # enclosing (12, 17, 31, 36)
    giou18 = iou18 - (418 - 397) / 418  # enclosing (12, 12, 31, 34)
    # DFL per side, prediction one-hot at bin 1 (the others at log-probability -30): a target t in
    # [0, 1) costs 30 (1 - t), in [1, 2) 30 (t - 1). Anchor 26 = (2.5, 3.5) in grid units, gt / 8 =
    # (1.625, 2.125, 3.875, 4.25): sides 0.875, 1.375, 1.375, 0.75; anchor 18 = (2.5, 2.5): 0.875,
    # 0.375, 1.375, 1.75.
    dfl26 = 30 * (0.125 + 0.375 + 0.375 + 0.25) / 4
    dfl18 = 30 * (0.125 + 0.625 + 0.375 + 0.75) / 4
    weights = 0.5 + 0.5  # each positive weighs its best class score, sigmoid(0)
    expected = torch.tensor([
        (LN2 * (iou26 + iou18) + (ANCHORS * NC - 2) * NEG) / 2,     # cls, over 2 positives
        2.0 * 0.5 * ((1 - giou26) + (1 - giou18)) / weights,       # box
        0.25 * 0.5 * (dfl26 + dfl18) / weights,                     # dfl
    ])
    loss, items = PicoDetLoss(NC)(constant_outputs(), torch.tensor([box(0, 1, *GT)]))
    torch.testing.assert_close(items, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, expected.sum(), rtol=1e-5, atol=1e-6)  # global batch 1


def test_box_or_centre_geometry_keeps_positives_inside_the_box() -> None:
    """A thin box (2, 2, 10, 62), centre (6, 32). Its centre region at stride 8 (20 px each way) holds
    the anchor columns x = 4, 12, 20 at rows y = 20..44; the box holds only column x = 4. Let the
    four column-12 anchors predict the box exactly (IoU 1: dynamic k = 4) and every other anchor
    predict a box far away. YOLOX's centre geometry takes those four (in the centre region: no
    penalty); PicoDet's penalises anchors outside the box, so it takes four that lie in both
    regions (column 4 at stride 8, column 8 at stride 16) although they overlap nothing."""
    loss = PicoDetLoss(NC)
    points, strides = loss.anchors([(8, 8), (4, 4), (2, 2), (1, 1)], device=torch.device("cpu"), dtype=torch.float32)
    centres = points * strides
    gt = torch.tensor([2.0, 2.0, 10.0, 62.0])
    pred = torch.tensor([100.0, 100.0, 101.0, 101.0]).repeat(ANCHORS, 1)
    column12 = [y * 8 + 1 for y in (2, 3, 4, 5)]  # stride 8, x = 12, y = 20 .. 44
    pred[column12] = gt
    positives = {}
    for region in ("centre", "box_or_centre"):
        assigner = SimOTAAssigner(radius=2.5, iou_weight=6.0, region=region, score_eps=1e-7)  # type: ignore[arg-type]
        out = assigner(torch.full((1, ANCHORS, NC), 0.5), xyxy_to_xywh(pred)[None], centres, strides,
                       torch.tensor([[1]]), xyxy_to_xywh(gt)[None, None], torch.tensor([[True]]))
        positives[region] = out.foreground[0].nonzero()[:, 0].tolist()
    assert positives["centre"] == column12
    chosen = centres[positives["box_or_centre"]]  # four of the eight cost-free anchors (stride 8 and 16)
    assert len(chosen) == 4 and ((chosen[:, 0] > 2) & (chosen[:, 0] < 10)).all()


def test_assigner_rejects_an_unknown_region() -> None:
    from libreyolo_models import ConfigError

    with pytest.raises(ConfigError, match="'centre' .* or 'box_or_centre'"):
        SimOTAAssigner(region="box")  # type: ignore[arg-type]


def test_duplicate_boxes_give_the_loss_of_one() -> None:
    loss_fn = PicoDetLoss(NC)
    one = loss_fn(constant_outputs(), torch.tensor([box(0, 1, *GT)]))[1]
    two = loss_fn(constant_outputs(), torch.tensor([box(0, 1, *GT)] * 2))[1]
    torch.testing.assert_close(two, one)


def test_no_boxes_leaves_only_the_background_class_term_and_every_output_gets_a_gradient() -> None:
    outputs = leaves(constant_outputs(batch=2))
    loss, items = PicoDetLoss(NC)(outputs, torch.zeros(0, 6))
    torch.testing.assert_close(items, torch.tensor([2 * ANCHORS * NC * NEG, 0.0, 0.0]))  # positives floored at 1
    torch.testing.assert_close(loss, items.sum() * 2)  # x global batch (per-image sum)
    loss.backward()
    assert all(o.grad is not None and torch.isfinite(o.grad).all() for o in outputs)


def test_two_ranks_average_to_the_one_process_loss() -> None:
    torch.manual_seed(0)
    full = leaves([m + 0.3 * torch.randn_like(m) for m in constant_outputs(batch=4, distance=2)])
    targets = torch.tensor([box(0, 0, 8, 8, 40, 40), box(0, 1, 30, 20, 62, 60), box(1, 1, 4, 4, 60, 30),
                            box(1, 0, 20, 30, 50, 62), box(2, 0, 10, 10, 50, 50), box(3, 1, 0, 20, 30, 60)])
    assert_two_ranks_average_to_one_process(PicoDetLoss(NC), full, targets, background_rank=False)
    assert_two_ranks_average_to_one_process(PicoDetLoss(NC), leaves(full), targets[:4], background_rank=True)


def test_loss_falls_over_twenty_steps_through_the_family() -> None:
    """PicoDet-s at 64 px, batch 2, SGD: the family's seams and loss learn a fixed batch."""
    torch.manual_seed(0)
    model = LibrePICODET(size="s", nc=3, imgsz=IMGSZ)
    images = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([box(0, 0, 8, 8, 30, 30), box(0, 1, 36, 20, 60, 50), box(1, 2, 10, 12, 54, 58)])
    optimizer = torch.optim.SGD(model.net.parameters(), lr=0.01, momentum=0.9)
    losses = losses_over_steps(model, images, targets, optimizer)
    assert max(losses[-3:]) < 0.6 * losses[0], losses
