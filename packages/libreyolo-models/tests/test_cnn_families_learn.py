"""Learning works for the issue-40 CNN families, not just runs: YOLOv9-E2E-t from scratch on the
bundled shapes set on the CPU, to mAP50 over 0.5, predicting through its NMS-free top-k.

Outside the default (CI) run (``learning``): minutes on 2 cores.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreYOLO9E2E

# As test_train_learns.QUICK, 12 epochs: at 10, YOLOv9-E2E-t ended at mAP50 0.522 (3.8 min), too near the bar.
QUICK = {"data": "shapes", "imgsz": 128, "batch": 16, "nbs": 16, "epochs": 12, "close_mosaic": 4, "workers": 0,
         "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(1200)
def test_yolo9_e2e_t_learns_shapes_on_cpu_to_map50_over_half(tmp_path) -> None:
    """Measured (2026-12-05, shared 2-core CPU, load 6-8): 12 epochs in 3.3 min, mAP50 0.568
    (mAP50-95 0.402); 10 epochs gave 0.522 in 3.8 min under heavier load."""
    started = time.perf_counter()
    model = LibreYOLO9E2E(size="t")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    assert outcome.metrics["metrics/mAP50"] >= 0.5, outcome.summary()
    again = model.val(data="shapes", imgsz=128, workers=1, verbose=False)  # the NMS-free top-k path
    assert again.map50 >= 0.5
