"""YOLOX on GPUs: graphed inference replays eager bit for bit (cuda), and ``device="0,1"`` trains
YOLOX-s with spawned NCCL workers (multigpu).

The predict-level test declares ``inference_capture`` for the test's own model whatever the
family declares, so it checks the behaviour the declaration unlocks.
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLOX


def _model() -> LibreYOLO:
    torch.manual_seed(0)
    model = LibreYOLOX(size="s", nc=3, imgsz=320)
    with torch.no_grad():  # the untrained prior (0.01 x 0.01) scores nothing; lift it so NMS has work
        for obj, cls in zip(model.net.head.obj_preds, model.net.head.cls_preds):
            obj.bias.fill_(2.0)
            cls.bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return model.to(0).eval()


def _same(a, b) -> bool:  # noqa: ANN001
    return len(a) == len(b) and all(torch.equal(x.boxes.data, y.boxes.data) for x, y in zip(a, b))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_graphed_inference_seam_replays_eager_bit_for_bit(dtype: torch.dtype) -> None:
    from libreyolo_cudagraph import contrasting_probes, verify_parity

    model = _model()
    model.net.to(dtype)
    probe_a, probe_b = contrasting_probes((2, 3, 320, 320), dtype=dtype, device="cuda")
    with torch.inference_mode():
        report = verify_parity(model.inference_forward, probe_a, probe_b, watch=model.net, name="yolox-s")
    assert report.ok, report.summary()


@pytest.mark.cuda
def test_graphed_predict_detections_equal_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    declared = model.spec.task("detect")
    if not declared.inference_capture:
        verified = replace(model.spec, tasks={"detect": replace(declared, inference_capture=True)})
        monkeypatch.setattr(model, "spec", verified)
    eager = model(SAMPLE_IMAGE, conf=0.3, max_det=50)
    first = model(SAMPLE_IMAGE, conf=0.3, max_det=50, cuda_graph=True)   # captures
    second = model(SAMPLE_IMAGE, conf=0.3, max_det=50, cuda_graph=True)  # replays
    assert len(eager[0]) > 0 and _same(eager, first) and _same(eager, second)
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["graphs"][0]["replays"] >= 1


@pytest.mark.multigpu
def test_device_0_1_trains_yolox_s_on_shapes_and_the_caller_holds_the_best(tmp_path: Path) -> None:
    model = LibreYOLOX(size="s")
    outcome = model.train(data="shapes", epochs=1, imgsz=320, batch=32, device="0,1", project=str(tmp_path),
                          verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert (ckpt["model_family"], ckpt["world_size"], ckpt["global_batch"]) == ("yolox", 2, 32)
    best = LibreYOLO(outcome.best)
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    with (outcome.run_dir / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    losses = [float(row[f"train/{name}_loss"]) for name in ("iou", "obj", "cls", "l1")]
    assert all(math.isfinite(v) for v in losses) and losses[3] > 0  # one epoch <= close_mosaic: L1 on
    assert outcome.metrics.get("metrics/mAP50", -1) >= 0
