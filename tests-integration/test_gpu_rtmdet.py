"""RTMDet's inference seam under CUDA graphs on a real GPU: the graphed predict equals eager.

These tests switch the declaration on for one model instance, whatever the family declares, so
they check exactly what the declaration promises.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreRTMDet, LibreYOLO

pytestmark = pytest.mark.cuda


def _calibrated(size: str, nc: int = 3, imgsz: int = 320) -> LibreYOLO:
    """Random weights with realistic BatchNorm statistics and class biases that pass conf 0.3."""
    torch.manual_seed(0)
    model = LibreRTMDet(size=size, nc=nc, imgsz=imgsz)
    model.net.train()
    with torch.no_grad():
        for seed in (0, 1):
            g = torch.Generator().manual_seed(seed)
            model.net.forward_rgb(torch.rand(4, 3, imgsz, imgsz, generator=g))
        for conv in model.net.head.rtm_cls:
            conv.bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    model.net.eval()
    decl = model.spec.task(model.task)
    model.spec = replace(model.spec, tasks={model.task: replace(decl, inference_capture=True)})
    return model.to(0)


def _same(a, b) -> bool:  # noqa: ANN001
    return len(a) == len(b) and all(torch.equal(x.boxes.data, y.boxes.data) for x, y in zip(a, b))


@pytest.mark.parametrize("size", ["t", "m"])  # reg * stride, and exp(reg) * stride
def test_graphed_predict_detections_equal_eager(size: str) -> None:
    model = _calibrated(size)
    eager = model(SAMPLE_IMAGE, conf=0.3, max_det=50)
    first = model(SAMPLE_IMAGE, conf=0.3, max_det=50, cuda_graph=True)   # captures
    second = model(SAMPLE_IMAGE, conf=0.3, max_det=50, cuda_graph=True)  # replays
    assert len(eager[0]) > 0 and _same(eager, first) and _same(eager, second)
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["graphs"][0]["replays"] >= 1


def test_graphed_inference_seam_is_bit_identical_on_contrasting_probes_fp32_and_fp16() -> None:
    from libreyolo_cudagraph import contrasting_probes, verify_parity

    model = _calibrated("s")
    for dtype in (torch.float32, torch.float16):
        model.net.to(dtype)
        a, b = contrasting_probes((2, 3, 320, 320), dtype=dtype, device=torch.device("cuda"))
        with torch.inference_mode():
            report = verify_parity(model.inference_forward, a, b, watch=model.net, name=f"rtmdet-s {dtype}")
        assert report.ok, report.summary()
