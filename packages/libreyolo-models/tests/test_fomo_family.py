"""FOMO: the truncated MobileNetV2 layout (torchvision's blocks, keys and shapes), target maps and
the background-weighted loss on hand-made cases, heatmap decoding, training steps, checkpoints and
``Results.points``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torchvision.models import mobilenet_v2

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LossContext
from libreyolo_models.families.fomo.family import FOMOFamily
from libreyolo_models.families.fomo.loss import fomo_loss, target_map
from libreyolo_models.families.fomo.nn import WIDTHS
from libreyolo_models.families.fomo.postprocess import decode_points
from libreyolo_models.tasks.point.task import PointOptions


@pytest.mark.parametrize(("size", "stem", "channels"), [("035", 16, 96), ("100", 32, 192)])
def test_backbone_is_torchvision_mobilenet_v2_cut_after_the_stride_8_expansion(size: str, stem: int,
                                                                                channels: int) -> None:
    """``backbone.<i>`` = torchvision's ``features.<i>`` for i < 7, ``backbone.7`` = ``features.7.conv.0``
    (Keras' block_6_expand_relu: 6 x 32 x width channels), every key and shape, in order."""
    model = LibreYOLO(f"LibreFOMO{size}.yaml", nc=3)
    ours = {k: tuple(v.shape) for k, v in model.net.state_dict().items()}
    reference = mobilenet_v2(width_mult=WIDTHS[size]).features.state_dict()
    mapped = {}
    for key, value in reference.items():
        block = int(key.split(".")[0])
        if block < 7:
            mapped[f"backbone.{key}"] = tuple(value.shape)
        elif key.startswith("7.conv.0."):
            mapped["backbone.7." + key.removeprefix("7.conv.0.")] = tuple(value.shape)
    backbone = [(k, s) for k, s in ours.items() if k.startswith("backbone.")]
    assert backbone == list(mapped.items())
    assert ours["backbone.0.0.weight"][0] == stem and ours["backbone.7.0.weight"][0] == channels
    assert [(k, s) for k, s in ours.items() if k.startswith("head.")] == [
        ("head.0.weight", (32, channels, 1, 1)), ("head.0.bias", (32,)), ("head.2.weight", (4, 32, 1, 1)),
        ("head.2.bias", (4,))]
    assert FOMOFamily.infer_size(model.net.state_dict(), "point") == size
    assert FOMOFamily.infer_nc(model.net.state_dict(), "point") == 3
    assert model.spec.sync_bn_default and model.spec.stride == 8


def test_output_is_a_heatmap_at_one_eighth_with_background_first() -> None:
    model = LibreYOLO("LibreFOMO035.yaml", nc=2).eval()
    with torch.no_grad():
        probs = model.inference_forward(torch.rand(2, 3, 64, 96))
    assert probs.shape == (2, 3, 8, 12)
    torch.testing.assert_close(probs.sum(1), torch.ones(2, 8, 12))


def test_target_map_marks_the_cell_of_each_centre() -> None:
    targets = torch.tensor([[0, 1, 0.5, 0.5], [0, 0, 0.99, 0.01], [1, 2, 0.1, 0.9], [1, 0, 0.1, 0.9]])
    labels = target_map(targets, 3, 4, 4, torch.device("cpu"))
    assert labels[0, 2, 2] == 2 and labels[0, 0, 3] == 1
    assert labels[1, 3, 0] in (1, 3)  # two centres in one cell: one label wins
    assert labels[2].eq(0).all() and int((labels > 0).sum()) == 3
    assert target_map(torch.zeros((0, 4)), 2, 3, 3, torch.device("cpu")).eq(0).all()


def test_loss_splits_object_and_background_cells_each_over_all_cells() -> None:
    logits = torch.zeros(1, 3, 2, 2)          # uniform: every cell's cross-entropy is log(3)
    labels = torch.tensor([[[0, 0], [0, 2]]])
    obj, bg = fomo_loss(logits, labels)
    assert obj.item() == pytest.approx(math.log(3) / 4) and bg.item() == pytest.approx(3 * math.log(3) / 4)
    obj, bg = fomo_loss(logits, torch.zeros(1, 2, 2, dtype=torch.long))  # no objects
    assert obj.item() == 0 and bg.item() == pytest.approx(math.log(3))


def test_gains_weigh_object_cells_and_are_reported_in_order() -> None:
    model = LibreYOLO("LibreFOMO035.yaml", nc=2)
    logits = torch.zeros(2, 3, 4, 4)
    targets = torch.tensor([[0, 0, 0.1, 0.1], [1, 1, 0.6, 0.6], [1, 0, 0.9, 0.9]])
    result = model.family.compute_loss(logits, targets, LossContext(gains={"obj": 100.0, "bg": 1.0}))
    per_cell = math.log(3) / 32
    assert result.items.tolist() == pytest.approx([100 * 3 * per_cell, 29 * per_cell], rel=1e-5)
    assert result.total.item() == pytest.approx(sum(result.items.tolist()), rel=1e-6)
    assert model.spec.task("point").loss_names == ("obj", "bg")


def test_decoding_finds_peaks_with_sub_cell_centres_one_class_per_cell() -> None:
    probs = torch.zeros(1, 3, 6, 6)
    probs[0, 0] = 1.0
    probs[0, 1, 1, 1], probs[0, 0, 1, 1] = 0.9, 0.1          # class 0 peak at cell (1, 1)
    probs[0, 1, 1, 2], probs[0, 0, 1, 2] = 0.3, 0.7          # a weaker neighbour pulls the centre right
    probs[0, 2, 4, 4], probs[0, 1, 4, 4], probs[0, 0, 4, 4] = 0.5, 0.45, 0.05  # cell of class 1 (not also 0)
    points = decode_points(probs, conf=0.25, max_det=10, stride=8)[0]
    assert points[:, 2].tolist() == [0.0, 1.0] and points[:, 3].tolist() == pytest.approx([0.9, 0.5])
    x, y = points[0, :2].tolist()
    assert y == pytest.approx(12.0) and x == pytest.approx(8 * (0.9 * 1.5 + 0.3 * 2.5) / 1.2)
    assert points[1, :2].tolist() == pytest.approx([36.0, 36.0])
    assert len(decode_points(probs, conf=0.95, max_det=10, stride=8)[0]) == 0
    only = decode_points(probs, conf=0.25, max_det=10, stride=8, classes=[1])[0]
    assert only[:, 2].tolist() == [1.0] and len(decode_points(probs, conf=0.25, max_det=1, stride=8)[0]) == 1


def test_a_flat_top_gives_one_point() -> None:
    probs = torch.zeros(1, 2, 5, 5)
    probs[0, 0] = 1.0
    probs[0, 1, 2, 2:4], probs[0, 0, 2, 2:4] = 0.8, 0.2     # two equal neighbouring cells
    points = decode_points(probs, conf=0.5, max_det=10, stride=8)[0]
    assert len(points) == 1 and points[0, 0].item() == pytest.approx(24.0)


def test_loss_falls_over_20_steps() -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreFOMO035.yaml", nc=2)
    family, net = model.family, model.net.train()
    targets = family.sample_targets(4, 64, torch.Generator().manual_seed(0))
    images = torch.full((4, 3, 64, 64), 0.5)
    for image, cls, x, y in targets.tolist():     # a square of the class's colour at each point
        cx, cy = int(x * 64), int(y * 64)
        images[int(image), int(cls), max(0, cy - 6):cy + 6, max(0, cx - 6):cx + 6] = 1.0
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    totals = []
    for _ in range(20):
        result = family.compute_loss(family.training_forward(net, images), targets, LossContext())
        opt.zero_grad()
        result.total.backward()
        opt.step()
        totals.append(result.total.item())
    assert totals[-1] < 0.5 * totals[0]


def test_checkpoint_round_trip_and_predict_gives_points(tmp_path: Path) -> None:
    model = LibreYOLO("LibreFOMO035.yaml", nc=5, imgsz=96)
    path = model.save(str(tmp_path / "fomo.pt"))
    again = LibreYOLO(str(path))
    assert (again.size, again.task, again.nc, again.imgsz) == ("035", "point", 5, 96)
    result = again(SAMPLE_IMAGE, conf=0.0)[0]
    assert result.boxes is None and result.points is not None and result.orig_shape == (360, 480)
    xy = result.points.xy
    assert len(result) > 0 and float(xy[:, 0].max()) <= 480 and float(xy[:, 1].max()) <= 360
    reference = model(SAMPLE_IMAGE, conf=0.0)[0].points.data
    assert torch.equal(reference, result.points.data)
    assert again.task_spec.postprocess_options({"conf": 0.4, "classes": [1]}) == PointOptions(0.4, 300, [1])
