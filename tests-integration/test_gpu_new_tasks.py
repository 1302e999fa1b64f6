"""Graphed predict equals eager for the tasks of the third wave (segment, pose, point, restore,
depth), on a real GPU: every field of ``Results`` bit for bit, random weights at a low confidence
so there is something to compare, through each family's own declaration (its green row in
``docs/parity-matrix.md``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO

pytestmark = pytest.mark.cuda

ROWS = [("fomo", "035", "point"), ("nafnet", "t", "restore"), ("depthanything", "s", "depth"),
        ("ec", "s", "segment"), ("ec", "s", "pose"), ("rfdetr", "n", "segment"), ("rfdetr", "n", "pose"),
        ("yolonas", "n", "pose"), ("yolo9_e2e", "t", "detect")]  # the NMS-free top-k head (issue 40)
FIELDS = ("boxes", "masks", "keypoints", "points", "image", "depth", "probs")


def _payload(result: Any) -> dict[str, torch.Tensor]:
    out = {}
    for name in FIELDS:
        value = getattr(result, name, None)
        if value is None:
            continue
        data = getattr(value, "data", value)
        out[name] = torch.as_tensor(np.asarray(data.cpu() if isinstance(data, torch.Tensor) else data))
    return out


@pytest.mark.parametrize(("family", "size", "task"), ROWS, ids=[f"{f}-{s}-{t}" for f, s, t in ROWS])
def test_graphed_predict_equals_eager(family: str, size: str, task: str) -> None:
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, task=task, device=0)
    assert model.spec.task(task).inference_capture, "the family's declaration (its parity row) allows graphs"
    # Random weights: the detect heads' score prior (~2e-4 for YOLOv9-E2E) sits under 0.01.
    conf = 1e-4 if task == "detect" else 0.01
    options = {"conf": conf} if task in ("detect", "segment", "pose", "point") else {}
    eager = _payload(model(SAMPLE_IMAGE, **options)[0])
    graphed = _payload(model(SAMPLE_IMAGE, cuda_graph=True, **options)[0])
    assert model.graph_info()["graphs"], "nothing was captured"
    again = _payload(model(SAMPLE_IMAGE, cuda_graph=True, **options)[0])  # a replay, not a capture
    assert eager.keys() == graphed.keys() == again.keys() and eager
    for name, tensor in eager.items():
        assert torch.equal(tensor, graphed[name]), f"{name} differs from eager"
        assert torch.equal(tensor, again[name]), f"{name} differs from eager on a replay"
    if task in ("detect", "segment", "pose", "point"):
        assert any(t.numel() for t in eager.values()), "nothing predicted: the comparison would be empty"


def test_nafnet_tiled_predict_equals_untiled_on_a_picture_that_fits() -> None:
    """Issue 42's GPU line: on a picture that fits one tile the tiled seam is the network itself,
    eager and graphed; beyond a tile the graphed seam replays each tile as eager computes it."""
    from libreyolo_models.families.nafnet.family import tile_overlap
    from libreyolo_models.layers.tiles import tiled_apply

    torch.manual_seed(0)
    model = LibreYOLO("LibreNAFNett.yaml", imgsz=64, device=0)
    family, net = model.family, model.net.cuda().eval()
    small = torch.rand(1, 3, 64, 48, device="cuda")
    large = torch.rand(1, 3, 150, 100, device="cuda")
    with torch.inference_mode():
        assert torch.equal(family.inference_forward(net, small), net(small))
        assert torch.equal(family.inference_forward(net, large), tiled_apply(net, large, family.tile, tile_overlap(family.tile)))
    picture = (np.random.default_rng(0).random((150, 100, 3)) * 255).astype(np.uint8)
    eager = _payload(model(picture)[0])
    graphed = _payload(model(picture, cuda_graph=True)[0])
    assert model.graph_info()["graphs"], "nothing was captured"
    assert eager.keys() == graphed.keys() and "image" in eager
    assert all(torch.equal(eager[k], graphed[k]) for k in eager), "graphed tiles differ from eager"


def test_mask_iou_on_the_gpu_equals_the_hosts_bit_for_bit() -> None:
    """Validation scores masks where the network left them (the GPU); the pixel counts are exact
    integers either way, so the IoU matrix is the host's to the last bit."""
    from libreyolo_models.tasks.segment.scoring import mask_iou

    gen = torch.Generator().manual_seed(5)
    pred = torch.rand(40, 160, 160, generator=gen) > 0.7
    gt = torch.rand(7, 160, 160, generator=gen) > 0.6
    assert np.array_equal(mask_iou(pred.cuda(), gt.cuda()), mask_iou(pred, gt))
