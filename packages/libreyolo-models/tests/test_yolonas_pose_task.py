"""YOLO-NAS-Pose as the family's ``pose`` task: names and sizes (n is pose-only), the loss's parts
on hand-worked cases, the OKS-aware assignment, the post-processing's keypoints, learning a fixed
batch, and a short training run on ``shapes-pose`` through ``LibreYOLO.train``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.family import LossContext
from libreyolo_models.contract.instances import InstanceTargets
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.yolonas.pose_loss import TERMS, YoloNasPoseLoss, oks_exponent
from libreyolo_models.layers.assign import TaskAlignedAssigner
from libreyolo_models.layers.dense_losses import quality_focal_loss

IMGSZ = 64


def _model(keypoints: int = 5) -> LibreYOLO:
    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLONASn-pose.yaml", imgsz=IMGSZ)
    model._replace(model._model.rebuilt(keypoints=keypoints), "five keypoints for the test")
    return model


def _targets(keypoints: int = 5, *, empty_second: bool = False) -> InstanceTargets:
    boxes = torch.tensor([[0, 0, 0.5, 0.5, 0.5, 0.4], [1, 0, 0.3, 0.6, 0.3, 0.5], [1, 0, 0.7, 0.3, 0.3, 0.3]])
    if empty_second:
        boxes = boxes[:1]
    xy = boxes[:, None, 2:4] + (torch.rand(len(boxes), keypoints, 2, generator=torch.Generator().manual_seed(1)) - 0.5) * 0.2
    kp = torch.cat((xy, torch.full((len(boxes), keypoints, 1), 2.0)), -1)
    kp[0, -1, 2] = 0  # one keypoint not labelled
    return InstanceTargets(boxes, keypoints=kp, sigmas=torch.full((keypoints,), 0.1))


def test_names_sizes_and_the_pose_only_size() -> None:
    pose = LibreYOLO("LibreYOLONASn-pose.yaml", imgsz=IMGSZ)
    assert (pose.task, pose.size, pose.nc, pose.keypoints) == ("pose", "n", 1, 17)
    assert LibreYOLO("LibreYOLONASs.yaml", task="pose", imgsz=IMGSZ).task == "pose"
    assert pose.spec.sizes_for("pose") == ("n", "s", "m", "l") and pose.spec.sizes_for("detect") == ("s", "m", "l")
    with pytest.raises(ConfigError, match=r"YOLO-NAS detect comes in sizes s, m, l; size 'n' is pose only"):
        LibreYOLO("LibreYOLONASn.yaml")
    with pytest.raises(ConfigError, match="one class"):
        LibreYOLO("LibreYOLONASn-pose.yaml", nc=3)


@pytest.mark.parametrize("size", ["n", "s", "m", "l"])
def test_bare_weights_tell_size_task_and_keypoints(size: str) -> None:
    impl = LibreYOLO("LibreYOLONASn-pose.yaml", imgsz=IMGSZ).spec.family_class()
    from libreyolo_models.families.yolonas.pose import YoloNasPoseNet

    state = YoloNasPoseNet(size, num_keypoints=5).state_dict()
    assert impl.infer_size(state, "pose") == size
    assert impl.infer_keypoints(state, "pose") == 5 and impl.infer_nc(state, "pose") == 1


def test_oks_exponent_and_quality_focal_loss_by_hand() -> None:
    # d^2 = 100, area 100, sigma 0.25: e = 100 / (2 * 100 * 0.25) = 2
    e = oks_exponent(torch.tensor([[10.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor(100.0),
                     torch.tensor([0.25]))
    assert torch.allclose(e, torch.tensor([2.0]))
    # logit 0 (p = 0.5) against 1: BCE ln 2, weight |0.5 - 1|^2
    assert math.isclose(quality_focal_loss(torch.tensor(0.0), torch.tensor(1.0)).item(), 0.25 * math.log(2), rel_tol=1e-6)
    assert quality_focal_loss(torch.tensor(20.0), torch.tensor(1.0)).item() < 1e-12  # already right: no loss


def test_the_alignment_factor_chooses_the_anchors() -> None:
    """Equal scores and boxes everywhere: the factor alone ranks the candidates (YOLO-NAS-Pose
    multiplies the metric by each anchor's OKS)."""
    points = torch.tensor([[float(x), 5.0] for x in range(10)])  # ten anchors on a line
    boxes = torch.tensor([[[-1.0, 0.0, 11.0, 10.0]]])
    pred_boxes = boxes.expand(1, 10, 4).clone()
    factor = torch.full((1, 1, 10), 0.1)
    factor[0, 0, [6, 7]] = 0.9
    assigned = TaskAlignedAssigner(topk=2, alpha=1.0, beta=6.0)(
        torch.full((1, 10, 1), 0.5), pred_boxes, points, torch.zeros(1, 1, dtype=torch.long), boxes,
        torch.ones(1, 1, dtype=torch.bool), align_factor=factor)
    assert assigned.foreground[0].nonzero().flatten().tolist() == [6, 7]


def test_loss_terms_hold_on_empty_uneven_and_unlabelled_targets() -> None:
    model = _model()
    net, family = model.net.train(), model.family
    images = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(2))
    raw = family.training_forward(net, images)
    ctx = LossContext(gains={})
    full = family.compute_loss(raw, _targets(), ctx)
    assert full.items.shape == (len(TERMS),) and torch.isfinite(full.items).all()
    # one image with people, one without: same terms, finite
    uneven = family.compute_loss(raw, _targets(empty_second=True), ctx)
    assert torch.isfinite(uneven.items).all()
    # no one at all: no positive, so the box and keypoint terms are exactly 0, yet every output is reached
    empty = InstanceTargets(torch.zeros(0, 6), keypoints=torch.zeros(0, 5, 3), sigmas=torch.full((5,), 0.1))
    none = family.compute_loss(raw, empty, ctx)
    assert none.items[1:].abs().sum() == 0 and torch.isfinite(none.total)
    none.total.backward()
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)
    # where an unlabelled keypoint (v = 0) lies does not matter
    moved = _targets()
    assert moved.keypoints is not None
    moved.keypoints[0, -1, :2] = torch.tensor([0.01, 0.99])
    again = family.compute_loss(family.training_forward(net, images), moved, ctx)
    assert torch.equal(again.items.detach(), family.compute_loss(family.training_forward(net, images), _targets(),
                                                                 ctx).items.detach())


def test_a_keypoint_count_other_than_the_heads_is_named() -> None:
    loss = YoloNasPoseLoss(5)
    raw = _model().family.training_forward(_model().net.train(), torch.rand(1, 3, IMGSZ, IMGSZ))
    with pytest.raises(ValueError, match=r"this head predicts 5 keypoints"):
        loss(raw, _targets(keypoints=7))


def test_postprocess_gathers_each_survivors_keypoints_from_its_anchor() -> None:
    model = _model()
    images = torch.rand(2, 3, IMGSZ, IMGSZ)
    with torch.no_grad():
        det, keypoints = model._model.inference_forward(images, net=model.net.eval())
    assert det.shape[:2] == keypoints.shape[:2] and keypoints.shape[2:] == (5, 3)
    options = model.task_spec.postprocess_options({"conf": 0.0, "max_det": 5})
    for b, prediction in enumerate(model.family.postprocess((det, keypoints), options)):
        assert len(prediction) == 5 and prediction.keypoints is not None
        for row, points in zip(prediction.det, prediction.keypoints):
            anchor = int((det[b, :, :4] == row[:4]).all(-1).nonzero()[0])
            assert torch.equal(points, keypoints[b, anchor].float()) and row[5] == 0


def test_the_fused_copy_folds_every_block_and_predicts_what_the_branches_do() -> None:
    model = _model()
    model.net.train()
    with torch.no_grad():  # running statistics away from their start, so folding them matters
        for _ in range(2):
            model.net(torch.rand(4, 3, IMGSZ, IMGSZ))
    model.net.eval()
    images = torch.rand(2, 3, IMGSZ, IMGSZ)
    with torch.no_grad():
        plain = model._model.inference_forward(images)
        fused_net = model._model.fused_net()
        fused = model._model.inference_forward(images, fused_net)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused_net.modules())
    assert all(m.fused for m in fused_net.modules() if hasattr(m, "rbr_reparam"))
    for a, b in zip(plain, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_loss_falls_on_a_fixed_batch() -> None:
    """Score-weighted terms start near zero (no anchor fits yet, so the soft targets are small),
    rise as anchors start to fit, then fall: the fit is judged against the peak."""
    model = _model()
    net, family = model.net.train(), model.family
    images = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=3e-4)
    losses, oks_terms = [], []
    torch.manual_seed(0)
    for _ in range(60):
        result = family.compute_loss(family.training_forward(net, images), _targets(), LossContext(gains={}))
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        losses.append(result.total.item())
        oks_terms.append(result.items[-1].item())
    assert sum(losses[-10:]) / 10 < 0.5 * max(losses), losses
    assert sum(oks_terms[-10:]) / 10 < 0.3 * max(oks_terms), oks_terms


@pytest.mark.slow
def test_one_epoch_on_shapes_pose_then_predict(tmp_path: Path) -> None:
    from libreyolo_models.tasks.pose.shapes_pose import ensure_shapes_pose

    data = ensure_shapes_pose(tmp_path / "data", split_sizes={"train": 8, "val": 4})
    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLONASn-pose.yaml")
    model.train(data=str(data), epochs=1, imgsz=IMGSZ, batch=4, workers=0, device="cpu", project=str(tmp_path),
                name="run", plots=False, verbose=False)
    best = LibreYOLO(str(tmp_path / "run" / "weights" / "best.pt"))
    assert (best.task, best.keypoints, best.size) == ("pose", 5, "n")
    result = best.predict(str(data.parent / "images" / "val"), imgsz=IMGSZ, conf=0.0, max_det=2)[0]
    assert result.keypoints is not None and result.keypoints.data.shape == (2, 5, 3)
    metrics = best.val(data=str(data), imgsz=IMGSZ, batch=4, workers=0, device="cpu", verbose=False).as_dict()
    assert "metrics/mAP50(P)" in metrics and math.isfinite(metrics["metrics/mAP50(P)"])
