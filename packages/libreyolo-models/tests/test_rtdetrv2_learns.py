"""Learning works, not just runs, for the DETR kit: RT-DETRv2 r18 from scratch on the bundled shapes
set, on the CPU, through ``train()`` (split seams, denoising head, the kit's matcher and loss).

RT-DETRv2 is the kit family whose schedule on this set is known: its network computes what
RT-DETR's does (the same blocks, the v2 layout adds only buffers and names), and RT-DETR r18 was
swept on an H200 for this budget (``test_rtdetr_learns.py``: lr0 5e-4 reached mAP50 0.39 after 10
epochs at 128 px). A detection transformer is costly on a CPU at any image size: the decoder's 300
queries (plus about 200 denoising queries per image) cost the same at 128 px as at 640 px, so this
test is outside the default (CI) selection (``learning``).

Measured here (2026-12-04, the shared 2-core machine at load average 4-10, one process, these
settings but validating after every epoch): 10 epochs in 57 min, mAP50 0.406 (mAP50-95 0.295);
mAP50 by epoch 0.03, 0.07, 0.10, 0.13, 0.16, 0.22, 0.26, 0.33, 0.37, 0.41; bbox loss 6.63 -> 2.81,
giou 8.34 -> 4.20. (D-FINE n, by contrast, at 160 px with 100 queries: mAP50 0.04 after 6 epochs;
its stem is frozen at random initialisation, as upstream builds it for a pretrained backbone.)
"""

from __future__ import annotations

import csv
import logging
import time

import pytest

from libreyolo_models import LibreRTDETRv2

log = logging.getLogger(__name__)

QUICK = {"data": "shapes", "imgsz": 128, "batch": 8, "nbs": 8, "epochs": 10, "lr0": 5e-4, "workers": 0,
         "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(7200)
def test_rtdetrv2_r18_learns_shapes_on_cpu(tmp_path) -> None:
    started = time.perf_counter()
    model = LibreRTDETRv2(size="r18")
    outcome = model.train(project=str(tmp_path), **QUICK)
    log.info("trained in %.1f min: %s", (time.perf_counter() - started) / 60, outcome.summary())
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    first, last = rows[0], rows[-1]
    for term in ("bbox", "giou"):  # the box terms fall as matching settles
        assert float(last[f"train/{term}_loss"]) < 0.85 * float(first[f"train/{term}_loss"]), (first, last)
    assert outcome.metrics["metrics/mAP50"] > 0.3, outcome.summary()
