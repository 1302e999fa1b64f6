"""Learning works, not just runs: RT-DETR r18 from scratch on the bundled shapes set, on the CPU.

A detection transformer is costly on a CPU at any image size: the decoder's 300 queries (plus
about 200 denoising queries per image) cost the same at 128 px as at 640 px, so a step is
dominated by it. This test is therefore outside the default (CI) selection (``learning``); the
GPU learning test in ``tests-integration/test_gpu_rtdetr.py`` is the one that proves accuracy.
From scratch (no pretrained backbone), the learning rate is raised to 5e-4 (backbone 5e-5).

Measured once (2026-12-01, 1 thread of a shared 2-core CPU under a load of ~10): 3 epochs in 67
minutes; mAP50 0.025, 0.064, 0.106 after epochs 1-3 (mAP50-95 0.052); box L1 loss -27 %, GIoU
loss -21 %. mAP50 > 0.3 would take about 8 epochs at that pace: far past a CI budget.
"""

from __future__ import annotations

import csv
import time

import pytest

from libreyolo_models import LibreRTDETR

QUICK = {"data": "shapes", "imgsz": 128, "batch": 8, "nbs": 8, "epochs": 3, "lr0": 5e-4, "workers": 0,
         "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(5400)
def test_rtdetr_r18_learns_shapes_on_cpu(tmp_path) -> None:
    started = time.perf_counter()
    model = LibreRTDETR(size="r18")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    first, last = rows[0], rows[-1]
    for term in ("bbox", "giou"):  # the box terms fall as matching settles
        assert float(last[f"train/{term}_loss"]) < 0.85 * float(first[f"train/{term}_loss"]), (first, last)
    assert outcome.metrics["metrics/mAP50"] > 0.05, outcome.summary()
