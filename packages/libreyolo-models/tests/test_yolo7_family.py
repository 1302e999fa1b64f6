"""YOLOv7 on its own and through the facade: RepConv and implicit-layer fusion, the anchor SimOTA
assigner (hand-worked slots and matches), the loss (hand-worked background value, two ranks),
learning, predictions, checkpoints and declarations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from loss_falls import train_steps
from rank_pairs import assert_two_ranks_match_one_process

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLO7, Results
from libreyolo_models.families.yolo7.loss import Yolo7Loss
from libreyolo_models.families.yolo7.nn import Yolo7Net, anchors_in_grid_units
from libreyolo_models.layers.anchor_ota import AnchorOTAAssigner, _pairwise_iou
from libreyolo_models.layers.fuse import fuse_network, fused_copy
from libreyolo_models.layers.repconv import RepConv3x3
from libreyolo_models.zoo.registry import get_family, parse_model_name

NC = 3
ANCHORS = anchors_in_grid_units("tiny")


def _spread_batchnorms(net: torch.nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=gen) - 0.5)


@pytest.mark.parametrize("identity", [False, True])
def test_repconv_fuses_into_one_conv_with_the_same_output(identity: bool) -> None:
    torch.manual_seed(0)
    block = RepConv3x3(16, 16, act=torch.nn.SiLU(), identity=identity)
    _spread_batchnorms(block)
    block.eval()
    x = torch.randn(2, 16, 9, 9)
    with torch.no_grad():
        before = block(x)
        assert block.fuse_for_inference() and not block.fuse_for_inference()
        after = block(x)
    assert block.rbr_dense is None and block.rbr_reparam is not None
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


def test_fused_base_network_equals_the_unfused_one() -> None:
    """YOLOv7 (base) holds three RepConvs; with BN folds and the implicit layers folded into the
    output convs (the official deploy conversion) the outputs stay equal to float tolerance."""
    torch.manual_seed(0)
    net = Yolo7Net("base", NC)
    _spread_batchnorms(net)
    with torch.no_grad():
        for ia, im in zip(net.detect.ia, net.detect.im):
            ia.implicit.normal_(0, 0.5)
            im.implicit.normal_(1, 0.5)
    net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = net(x)["predictions"]
        fused, count = fused_copy(net)
        after = fused(x)["predictions"]
    assert count == 86 + 3 + 1 and fused.detect.implicit_folded  # conv-BN units, RepConvs, the head
    assert fused.model[102].rbr_reparam is not None
    assert net.model[102].rbr_dense is not None  # the trained network keeps its branches
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-3)


def test_fuse_network_in_place_reports_every_unit() -> None:
    net = Yolo7Net("tiny", NC)
    assert fuse_network(net) == 55 + 1  # 55 conv-BN units and the head


def _slots_of_one_box(cx: float, cy: float, size: float = 16.0) -> object:
    raw = [torch.zeros(1, 3, 64 // s, 64 // s, 5 + NC) for s in (8, 16, 32)]
    boxes = torch.tensor([[[cx, cy, size, size]]])
    return AnchorOTAAssigner().slots(raw, ANCHORS, (8, 16, 32), boxes, torch.ones(1, 1, dtype=torch.bool))


def test_candidate_slots_are_the_centre_cell_and_the_two_nearest_neighbours_of_fitting_anchors() -> None:
    """A 16 px box centred at (18.4, 21.6): level 0 (stride 8) centre (2.3, 2.7) -> cells (2, 2),
    left (1, 2) and below (2, 3), all three tiny anchors fit; level 1 centre (1.15, 1.35) ->
    (1, 1), left (0, 1), above (1, 0), anchors 0 and 1 fit (anchor 2 is 7.4x too tall); level 2:
    no anchor within 4x (the smallest is 7.25x too wide)."""
    slots = _slots_of_one_box(18.4, 21.6)
    valid = slots.valid[0]
    assert [int((valid & (slots.level[0] == lv)).sum()) for lv in range(3)] == [9, 6, 0]
    cells0 = {(int(j), int(i)) for j, i, v, lv in zip(slots.gj[0], slots.gi[0], valid, slots.level[0]) if v and lv == 0}
    assert cells0 == {(2, 2), (2, 1), (3, 2)}
    cells1 = {(int(a), int(j), int(i)) for a, j, i, v, lv in
              zip(slots.anchor[0], slots.gj[0], slots.gi[0], valid, slots.level[0]) if v and lv == 1}
    assert cells1 == {(a, j, i) for a in (0, 1) for j, i in ((1, 1), (1, 0), (0, 1))}


def test_one_close_prediction_is_the_only_positive_and_a_duplicate_box_gets_one() -> None:
    """One slot predicts the box almost exactly (IoU 0.88), every other one misses it: that slot is
    the only positive, and with the box given twice still the only one. The IoU is kept below 1 so
    that the dynamic k (the top-10 IoU sum, truncated) is 1 for the duplicate too on any CPU: an
    exact prediction's IoU sums to exactly 2 or a hair under, k 2 or 1 by the CPU's sigmoid."""
    gen = torch.Generator().manual_seed(0)
    raw = [torch.randn(1, 3, 64 // s, 64 // s, 5 + NC, generator=gen) for s in (8, 16, 32)]
    raw[0][..., 2:4] = -6.0  # every level-0 slot predicts a tiny box: IoU ~0 with the target
    raw[1][..., 2:4] = -6.0
    # Slot (level 0, anchor 1, cell row 2 col 2) predicts a 15 px box centred on the 16 px box at
    # (20, 20): centre offset (sig * 2 - 0.5) = 0.5 -> t = 0; size (sig * 2)^2 * anchor = 15 / 8 cells.
    anchor = ANCHORS[0, 1]
    raw[0][0, 1, 2, 2, :2] = 0.0
    raw[0][0, 1, 2, 2, 2:4] = torch.logit(torch.sqrt(torch.tensor(15 / 8) / anchor) / 2)
    boxes = torch.tensor([[[20.0, 20.0, 16.0, 16.0]]])
    assigner = AnchorOTAAssigner()
    slots = assigner.slots(raw, ANCHORS, (8, 16, 32), boxes, torch.ones(1, 1, dtype=torch.bool))
    fg, gt_index = assigner.match(slots, torch.tensor([[1]]), boxes, torch.ones(1, 1, dtype=torch.bool))
    (hit,) = fg[0].nonzero().flatten().tolist()
    assert (slots.level[0, hit], slots.anchor[0, hit], slots.gj[0, hit], slots.gi[0, hit]) == (0, 1, 2, 2)
    gts = torch.tensor([[[12.0, 12.0, 28.0, 28.0]]])
    assert abs(_pairwise_iou(gts, slots.boxes[:, hit:hit + 1]).item() - 15 * 15 / 256) < 1e-4
    twice = boxes.repeat(1, 2, 1)
    slots2 = assigner.slots(raw, ANCHORS, (8, 16, 32), twice, torch.ones(1, 2, dtype=torch.bool))
    fg2, _ = assigner.match(slots2, torch.tensor([[1, 1]]), twice, torch.ones(1, 2, dtype=torch.bool))
    assert fg2.sum() == 1


def test_background_only_loss_is_the_hand_computed_objectness_value() -> None:
    """No boxes, every logit x, 64 px: only objectness, ``sum(balance) * softplus(x)`` times the
    scaled gain ``0.7 * (64 / 640)^2``; box and cls are 0."""
    x = -2.0
    raw = [torch.full((2, 3, 64 // s, 64 // s, 5 + NC), x) for s in (8, 16, 32)]
    _, items = Yolo7Loss(NC, ANCHORS)(raw, torch.zeros(0, 6))
    expected = (4.0 + 1.0 + 0.4) * math.log1p(math.exp(x)) * 0.7 * (64 / 640) ** 2
    assert items[1].item() == pytest.approx(expected, rel=1e-5)
    assert items[0] == 0 and items[2] == 0


def test_gains_follow_the_official_scaling_and_one_class_has_no_class_term() -> None:
    loss = Yolo7Loss(80, ANCHORS)
    assert loss.scaled_gains(640) == pytest.approx((0.05, 0.7, 0.3))
    assert Yolo7Loss(8, ANCHORS).scaled_gains(320) == pytest.approx((0.05, 0.7 / 4, 0.3 * 8 / 80))
    raw = [torch.randn(1, 3, 64 // s, 64 // s, 6) for s in (8, 16, 32)]
    _, items = Yolo7Loss(1, ANCHORS)(raw, torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.3]]))
    assert items[2] == 0 and items[0] > 0


def test_two_ranks_at_half_batch_match_one_process() -> None:
    gen = torch.Generator().manual_seed(3)
    full = [torch.randn(4, 3, 64 // s, 64 // s, 5 + NC, generator=gen).requires_grad_() for s in (8, 16, 32)]
    targets = torch.tensor([[0, 0, 0.3, 0.3, 0.3, 0.25], [0, 2, 0.7, 0.6, 0.2, 0.3], [1, 1, 0.5, 0.5, 0.5, 0.4],
                            [3, 2, 0.4, 0.6, 0.6, 0.5]])
    assert_two_ranks_match_one_process(Yolo7Loss(NC, ANCHORS), full, targets, normalizers=3)


def test_wrong_head_layout_is_named() -> None:
    raw = [torch.randn(1, 3, 8 // s * 8, 8 // s * 8, 5 + 5) for s in (1, 2, 4)]
    with pytest.raises(ValueError, match=r"expected \[B, 3, H, W, 8\] \(5 \+ nc=3\)"):
        Yolo7Loss(NC, ANCHORS)(raw, torch.zeros(0, 6))


def test_loss_falls_over_20_steps() -> None:
    """Measured (seed 0): 0.048 -> 0.021 (box, obj and cls all fall)."""
    torch.manual_seed(0)
    history = torch.stack(train_steps(LibreYOLO7(size="tiny", nc=NC))).sum(1)
    assert history[-5:].mean() < 0.7 * history[:5].mean(), history.tolist()


def test_names_and_declarations() -> None:
    parsed = parse_model_name("LibreYOLO7tiny.pt")
    assert (parsed.family.name, parsed.size) == ("yolo7", "tiny")
    spec = get_family("yolo7")
    decl = spec.task("detect")
    assert spec.sizes == ("tiny", "base", "x") and spec.sync_bn_default and spec.ddp_autospawn
    assert decl.inference_capture and decl.train_capture  # parity rows and certificates, H200 2026-12-05
    assert dict(decl.loss_gains) == {"box": 0.05, "obj": 0.7, "cls": 0.3}
    model = LibreYOLO("LibreYOLO7tiny.yaml")
    assert (model.spec.name, model.size, model.imgsz, model.nc) == ("yolo7", "tiny", 640, 80)


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    m = LibreYOLO7(size="tiny", nc=3, names=["circle", "square", "triangle"], imgsz=64)
    _spread_batchnorms(m.net, seed=1)
    with torch.no_grad():  # objectness and class priors high enough for NMS to have work
        for conv in m.net.detect.m:
            conv.bias.view(3, -1)[:, 4:].fill_(1.0)
    return m.eval()


def test_predict_returns_results_and_fused_matches_unfused(model: LibreYOLO) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=20, fuse=False)
    assert isinstance(res, Results) and res.orig_shape == (360, 480) and 0 < len(res) <= 20
    fused = model(SAMPLE_IMAGE, conf=0.3, max_det=20, fuse=True)[0].boxes.data
    assert model.fused and len(fused) == len(res)
    torch.testing.assert_close(fused, res.boxes.data, rtol=1e-4, atol=1e-3)


def test_checkpoint_round_trip_gives_the_same_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "yolo7.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"]) == ("yolo7", "tiny", 3)
    loaded = LibreYOLO(path)
    before = model(SAMPLE_IMAGE, conf=0.3, max_det=20)[0].boxes.data
    assert len(before) and torch.equal(before, loaded.eval()(SAMPLE_IMAGE, conf=0.3, max_det=20)[0].boxes.data)
