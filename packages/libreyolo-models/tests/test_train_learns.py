"""Learning works, not just runs: YOLOv9-t and RTMDet-t from scratch on the bundled shapes set, on the CPU.

Slow by nature (minutes on 2 cores); they are the only proof that the loss, assigner,
augmentation and schedule fit together. YOLOv9-t's is in the default (CI) run (marked ``ci``);
RTMDet-t's runs with ``-m learning``.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreRTMDet, LibreYOLO9

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


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(900)
def test_rtmdet_t_learns_shapes_on_cpu_to_map50_over_half(tmp_path) -> None:
    """The same settings; everything else is RTMDet's recipe (AdamW at lr 0.004, cosine to 5 %).

    Slower than YOLOv9-t per epoch on the CPU (about 40 s per epoch at 128 px, one thread, idle
    machine), so outside the CI selection.
    """
    started = time.perf_counter()
    model = LibreRTMDet(size="t")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    assert outcome.metrics["metrics/mAP50"] >= 0.5, outcome.summary()
    again = model.val(data="shapes", imgsz=128, workers=1, verbose=False)
    assert again.map50 >= 0.5
