"""CNN detectors learn on one GPU: from scratch on the bundled shapes set at 320 px, the family's
own recipe (optimizer, schedule, augmentation), a few minutes each on an H200.

The CPU learning tests prove the pieces fit at 128 px; these prove it at a real image size on
the device path users train on (GPU augmentation, AMP, CUDA graphs for the families that
declare them).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from libreyolo_models import LibreYOLO, families

pytestmark = [pytest.mark.cuda, pytest.mark.slow, pytest.mark.learning]

# YOLOX-s ended at mAP50 0.000 here in every earlier run: under fp16 autocast its losses were NaN
# from the first epoch (its recipe now trains in fp32), and upstream's lr0 0.01 / 64 under the
# trainer's norm-10 clip could not move it. With the recipe's clipped step at lr0 0.01 in fp32 it
# reached 0.976 in a 40-epoch diagnostic run (2026-12-01). RTMDet-t runs graphed (its training
# capture is declared since its parity rows went green): 0.991 on 2026-12-01.
# The detectors of issues 39 and 40 were measured with these settings on 2026-12-05, twelve side by
# side on one H200 via tools/learn_families.py (docs/benchmarks.md, "Learning on one GPU"): all met
# 0.5 but YOLOv7-tiny (0.43 at 40 epochs, still rising: 80 here, not yet measured) and EC-s (0.42
# when its time ran out after 19 epochs). The encoder-decoder detectors train without pretrained
# backbones here, hence lr0 5e-4 (the recipes' 1e-4 assumes pretrained ones). PicoDet-s peaked at
# 0.84 and then fell to ~0.4 at lr0 0.025: it fails here (the last epoch counts) until re-tuned.
DETR_SCRATCH: dict[str, object] = {"epochs": 40, "lr0": 5e-4}
CASES: list[tuple[str, str, dict[str, object]]] = [
    ("yolox", "s", {"epochs": 40, "cuda_graph": True}),
    ("rtmdet", "t", {"epochs": 40, "cuda_graph": True}),
    ("yolonas", "s", {"epochs": 40, "lr0": 2e-3, "mosaic": 1.0, "scale": 0.5, "translate": 0.1}),
    ("picodet", "s", {"epochs": 40, "lr0": 0.025, "warmup_bias_lr": 0.025, "mosaic": 1.0, "scale": 0.5,
                      "translate": 0.1}),
    ("yolo9_e2e", "t", {"epochs": 40}),
    ("damoyolo", "ns", {"epochs": 40}),
    ("yolo7", "tiny", {"epochs": 80}),
    ("dfine", "n", DETR_SCRATCH),
    ("deim", "n", DETR_SCRATCH),
    ("deimv2", "atto", {"epochs": 60, "lr0": 5e-4}),
    ("rtdetrv2", "r18", DETR_SCRATCH),
    ("rtdetrv4", "s", DETR_SCRATCH),
    ("rfdetr", "n", DETR_SCRATCH),
    ("ec", "s", {"epochs": 60, "lr0": 5e-4}),
]
IDS = [f"{family}-{size}" for family, size, _ in CASES]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("family", "size", "settings"), CASES, ids=IDS)
def test_detector_learns_shapes_on_one_gpu_to_map50_over_half(tmp_path: Path, family: str, size: str,
                                                              settings: dict[str, object]) -> None:
    if family not in families():
        pytest.skip(f"{family} is not in this build's registry")
    model = LibreYOLO(family=family, size=size)
    outcome = model.train(data="shapes", imgsz=320, batch=16, device=0, workers=8,
                          project=str(tmp_path), verbose=False, plots=False, **settings)
    with (outcome.run_dir / "results.csv").open() as fh:
        curve = " ".join(f"{float(row['metrics/mAP50']):.3f}" for row in csv.DictReader(fh))
    print(f"{family}-{size}: {outcome.summary()}; mAP50 per epoch: {curve}")
    assert outcome.metrics["metrics/mAP50"] >= 0.5, f"{outcome.summary()}; mAP50 per epoch: {curve}"
