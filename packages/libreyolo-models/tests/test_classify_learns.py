"""Learning works for classification, not just runs: ResNet-18 from scratch on ``shapes-cls``, CPU.

Two tests: a short one CI runs (a slice of the set, six epochs, well above chance) and the long one
that reaches the brief's 90 % (about 10 CPU-minutes, outside CI).
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreYOLO

# CI's run: crops of the first 120 + 40 ``shapes`` images (204 + 65 crops, five classes), six
# epochs at 32 px. Measured once: 49 CPU-seconds with OMP_NUM_THREADS=1, generation and imports
# included, top-1 0.45 (chance is 0.2). The bar sits between the two.
CI_SLICE = {"train": 120, "val": 40}
# Its 72 iterations (12 batches x 6 epochs) all warm up toward lr0, over 100 iterations: the schedule
# it was measured with (the trainer's 100-iteration warmup floor is now capped to 30 % of a run).
CI_RUN = {"imgsz": 32, "batch": 16, "nbs": 16, "epochs": 6, "lr0": 0.002, "warmup_epochs": 100 / 12,
          "crop_min_area": 0.35,
          "workers": 0, "device": "cpu", "val": False, "verbose": False, "plots": False}

# Small crops (32 px), no gradient accumulation (nbs = batch), crops of at least a third of each
# image (a shape must stay recognisable), validation after the last epoch only. About 10
# CPU-minutes (20 s an epoch on one core).
QUICK = {"data": "shapes-cls", "imgsz": 32, "batch": 16, "nbs": 16, "epochs": 30, "lr0": 0.001, "warmup_epochs": 1.0,
         "crop_min_area": 0.35, "workers": 0, "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
def test_resnet18_learns_shapes_cls_on_cpu_to_top1_over_90_percent(tmp_path) -> None:
    started, cpu_started = time.perf_counter(), time.process_time()
    model = LibreYOLO("LibreResNet18.yaml")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    cpu_minutes = (time.process_time() - cpu_started) / 60
    print(f"trained in {minutes:.1f} min ({cpu_minutes:.1f} CPU-min): {outcome.summary()}")
    assert outcome.metrics["metrics/accuracy_top1"] >= 0.9, outcome.summary()
    again = model.val(data="shapes-cls", imgsz=32, workers=0, verbose=False)
    assert again.top1 == pytest.approx(outcome.metrics["metrics/accuracy_top1"]) and again.top5 == 1.0


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(900)
def test_resnet18_learns_a_shapes_cls_slice_well_above_chance_in_ci_time(tmp_path) -> None:
    from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls

    started = time.process_time()
    generate_shapes_cls(tmp_path, split_sizes=CI_SLICE)
    model = LibreYOLO("LibreResNet18.yaml")
    outcome = model.train(data=str(tmp_path / "data.yaml"), project=str(tmp_path / "runs"), save=False, **CI_RUN)
    print(f"trained in {time.process_time() - started:.0f} CPU-s: {outcome.summary()}")
    assert outcome.metrics["metrics/accuracy_top1"] >= 0.35, outcome.summary()  # chance: 0.2
