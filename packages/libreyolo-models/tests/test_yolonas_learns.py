"""Learning works, not just runs: YOLO-NAS-s from scratch on the bundled shapes set, on the CPU, to
mAP50 over 0.5 (marked ``learning``: minutes, outside the default run).

The family's recipe is upstream's COCO recipe (AdamW at 5e-4, no mosaic: upstream leans on mixup,
which TrainConfig has no option for). On 400 images that recipe learns slowly (CPU, 128 px,
2026-12-04: mAP50 0.30 after 20 epochs, 0.31 after 15 at lr 2e-3); with mosaic and lr 2e-3 the same
network reached 0.59 after 14 epochs and 0.79 after 21 of a 25-epoch schedule. This test runs that
setting for 20 epochs; everything else (AdamW, cosine to 10 %, no clipping, fp32) is the recipe.
Measured (2026-12-04, the shared 2-core CPU at load average ~10): 19.4 minutes, mAP50 0.592 (16
epochs: 14.4 minutes, 0.528).
PicoDet-s was tried too: with its recipe and mosaic it stayed between 0.3 and 0.5 for 80 epochs
(its varifocal classifier separates the shapes slowly; docs/families/picodet.md).
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreYOLONAS

SETTINGS = {"data": "shapes", "imgsz": 128, "batch": 16, "nbs": 16, "epochs": 20, "close_mosaic": 4, "workers": 0,
            "device": "cpu", "val": False, "verbose": False, "plots": False,
            "lr0": 2e-3, "mosaic": 1.0, "scale": 0.5, "translate": 0.1}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(1800)
def test_yolonas_s_learns_shapes_on_cpu_to_map50_over_half(tmp_path) -> None:
    started = time.perf_counter()
    model = LibreYOLONAS(size="s")
    outcome = model.train(project=str(tmp_path), **SETTINGS)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    assert outcome.metrics["metrics/mAP50"] >= 0.5, outcome.summary()
    # The instance holds the best weights; fused for inference (every QARepVGG block one conv),
    # they score the same up to rounding.
    again = model.val(data="shapes", imgsz=128, workers=1, verbose=False, fuse=False)
    fused = model.val(data="shapes", imgsz=128, workers=1, verbose=False, fuse=True)
    assert again.map50 >= 0.5 and abs(fused.map50 - again.map50) < 0.005
