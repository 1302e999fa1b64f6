"""Learning works, not just runs: RT-DETR r18 from scratch on the bundled shapes set, on the CPU.

A detection transformer is costly on a CPU at any image size: the decoder's 300 queries (plus
about 200 denoising queries per image) cost the same at 128 px as at 640 px, so a step is
dominated by it (2.8 s for 8 images at 128 px on 2 idle cores). This test is therefore outside
the default (CI) selection (``learning``). From scratch (no pretrained backbone), lr0 is 5e-4.

The budget comes from a recipe sweep on an H200 (``tools/sweep_recipe.py``, 2026-12-01, same
settings): lr0 5e-4 reached mAP50 0.208 after 6 epochs, 0.312 after 8 and 0.390 after 10; lr0 1e-3
0.325 and 2e-3 0.126 after 10. Measured here (2026-12-01, 2 CPU threads): 10 epochs in 20.3 min,
mAP50 0.433 (mAP50-95 0.309).
"""

from __future__ import annotations

import csv
import time

import pytest

from libreyolo_models import LibreRTDETR

QUICK = {"data": "shapes", "imgsz": 128, "batch": 8, "nbs": 8, "epochs": 10, "lr0": 5e-4, "workers": 0,
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
    assert outcome.metrics["metrics/mAP50"] > 0.3, outcome.summary()
