"""Issue 8: the batched (GPU-path) augmentation trains to the same mAP as the per-sample CPU path.

Both paths run here on the CPU (``gpu_augment=True`` on a CPU device uses the same batched ops the
GPU runs); two seeds each. Same-draw pixel equivalence is tested in test_augment_equivalence.py;
this checks that what the model learns from either path is the same within run-to-run noise.
"""

from __future__ import annotations

import statistics

import pytest

from libreyolo_models import LibreYOLO9

SETTINGS = {"imgsz": 96, "batch": 16, "nbs": 16, "epochs": 12, "close_mosaic": 4, "workers": 0,
            "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(1200)
def test_gpu_path_and_cpu_path_reach_the_same_map(tmp_path) -> None:
    from libreyolo_models.data.shapes import generate_shapes

    # The first 240 + 60 images of the bundled shapes set: four runs must fit in CI's time.
    generate_shapes(tmp_path, split_sizes={"train": 240, "val": 60})
    results: dict[bool, list[float]] = {False: [], True: []}
    for gpu_augment in (False, True):
        for seed in (0, 1):
            model = LibreYOLO9(size="t")
            outcome = model.train(data=str(tmp_path / "data.yaml"), project=str(tmp_path / "runs"),
                                  name=f"gpu{int(gpu_augment)}-seed{seed}", seed=seed, gpu_augment=gpu_augment,
                                  **SETTINGS)
            results[gpu_augment].append(outcome.metrics["metrics/mAP50"])
    print(f"mAP50 per seed: CPU path {results[False]}, GPU path {results[True]}")
    noise = max(abs(results[False][0] - results[False][1]), abs(results[True][0] - results[True][1]))
    assert min(results[False] + results[True]) > 0.15, results  # every run learned something
    assert abs(statistics.mean(results[True]) - statistics.mean(results[False])) <= max(0.1, 2 * noise), results
