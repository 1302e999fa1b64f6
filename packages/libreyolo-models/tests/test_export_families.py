"""Every family in the registry exports: the ONNX graph of its inference seam gives PyTorch's
outputs, and the exported model predicts through the same task code (YOLOv9 is checked in full,
every format, in test_export.py; OpenVINO converts the same ONNX graph, so ONNX parity covers
what is family-specific)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, families

# family -> (size, imgsz): the smallest of each, at the smallest size its layout accepts
# (RT-DETR selects 300 queries from the encoder tokens: 128 px and up).
CASES = {"yolo9": ("t", 64), "yolox": ("n", 64), "rtdetr": ("r18", 128), "segformer": ("b0", 64), "rtmdet": ("t", 64),
         "resnet": ("18", 64), "efficientnetv2": ("b0", 64), "convnext": ("tiny", 64), "mobilenetv4": ("small", 64)}


def test_every_registered_family_has_an_export_case() -> None:
    """A family that lands without a line here fails, so it cannot skip the export check."""
    missing = sorted(set(families()) - set(CASES))
    assert not missing, f"add export cases (or exportable=False with a reason) for {missing}"


@pytest.mark.parametrize("family", [
    "yolox", "segformer", "rtmdet", "resnet", "efficientnetv2", "mobilenetv4",
    pytest.param("rtdetr", marks=pytest.mark.slow), pytest.param("convnext", marks=pytest.mark.slow),
])
def test_onnx_export_matches_pytorch(family: str, tmp_path: Path) -> None:
    size, imgsz = CASES[family]
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, nc=3, imgsz=imgsz).eval()
    path = model.export(format="onnx", batch=2, file=str(tmp_path / f"{family}.onnx"))
    runtime = LibreYOLO(path)
    images = torch.rand(2, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.inference_forward(images)
    got = runtime.inference_forward(images)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tolerance = 1e-4 * max(1.0, expected.abs().max().item()) if expected.dtype.is_floating_point else 0
    if family == "rtdetr":
        # Queries come out in the order of the encoder's top-k, which orders near-tied scores of an
        # untrained model freely: compare them as sets (every query has a twin within tolerance).
        for e, g in zip(expected, got):
            nearest = torch.cdist(e, g, p=float("inf")).min(1).values
            assert (nearest <= tolerance).float().mean().item() >= 0.98, nearest.max()
    elif expected.dtype.is_floating_point:
        assert (got - expected).abs().max().item() <= tolerance
    else:  # class maps: an arg-max may flip where two logits tie to rounding
        assert (got == expected).float().mean().item() >= 0.999
    ours, theirs = model.predict(SAMPLE_IMAGE, conf=0.0), runtime.predict(SAMPLE_IMAGE, conf=0.0)
    assert theirs[0].summary() == ours[0].summary()
