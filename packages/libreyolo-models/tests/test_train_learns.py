"""Learning works, not just runs: YOLOv9-t from scratch on the bundled shapes set, on the CPU.

Slow by nature (minutes on 2 cores); both are in the default test run because they are the only
proof that the loss, assigner, augmentation and schedule fit together.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreYOLO9

# Chosen to finish in about 3 minutes on a 2-core CPU: small images, no gradient accumulation
# (nbs = batch), mosaic closed for the last 4 epochs, validation after the last epoch only.
QUICK = {"data": "shapes", "imgsz": 128, "batch": 16, "nbs": 16, "epochs": 12, "close_mosaic": 4, "workers": 0,
         "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(900)
def test_yolo9t_learns_shapes_on_cpu_to_map50_over_half(tmp_path) -> None:
    started = time.perf_counter()
    model = LibreYOLO9(size="t")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    assert outcome.metrics["metrics/mAP50"] >= 0.5, outcome.summary()
    # The instance holds the best weights: validating it reproduces the best epoch's mAP.
    again = model.val(data="shapes", imgsz=128, workers=1, verbose=False)
    assert again.map50 >= 0.5
    # Fused for inference, the same weights score the same up to rounding.
    fused = model.val(data="shapes", imgsz=128, workers=1, verbose=False, fuse=True)
    assert model.fused and abs(fused.map50 - again.map50) < 0.005 and abs(fused.map50_95 - again.map50_95) < 0.005
