"""Export of the instance tasks to ONNX round-trips: a segment model (RF-DETR-n) and a pose model
(EC-s) give, through onnxruntime, the PyTorch model's seam outputs and the same ``Results``
(boxes, masks on >= 99.9 % of the pixels, keypoints within a hundredth of a pixel)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from export_checks import assert_same_detections

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO

pytest.importorskip("onnxruntime")

CASES = [("LibreRFDETRn.yaml", "segment", 48, 3), ("LibreECs.yaml", "pose", 64, 1)]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "task", "imgsz", "nc"), CASES, ids=["rfdetr-segment", "ec-pose"])
def test_onnx_round_trip(arch: str, task: str, imgsz: int, nc: int, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO(arch, task=task, nc=nc, imgsz=imgsz).eval()
    with torch.no_grad():  # spread the class biases so there are detections to compare
        for name, param in model.net.named_parameters():
            if "class" in name and name.endswith("bias"):
                param.normal_(0.0, 0.5)
    path = model.export(format="onnx", file=str(tmp_path / f"{task}.onnx"), device="cpu")
    exported = LibreYOLO(str(path))
    assert exported.task == task and exported.info().get("keypoints") == model.info().get("keypoints")
    images = torch.rand(2, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model._model.inference_forward(images)
    got = exported._model.inference_forward(images)
    assert isinstance(got, tuple | list) and len(got) == 2
    for a, b in zip(expected, got, strict=True):
        assert a.shape == b.shape and (a - b).abs().max().item() < 1e-3
    ours = model.predict(str(SAMPLE_IMAGE), conf=0.0, max_det=5, device="cpu")[0]
    theirs = exported.predict(str(SAMPLE_IMAGE), conf=0.0, max_det=5, device="cpu")[0]
    assert_same_detections(ours.boxes.data, theirs.boxes.data)
    if task == "segment":
        assert (ours.masks.data == theirs.masks.data).float().mean().item() >= 0.999
    else:
        assert (ours.keypoints.data - theirs.keypoints.data).abs().max().item() < 1e-2
