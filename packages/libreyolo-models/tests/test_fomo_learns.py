"""Learning works for the point task: FOMO (MobileNetV2 width 1.0) from scratch on the bundled
shapes-point set, on the CPU, finds the shapes' centres with F1 >= 0.8 (issue 42).

Measured (2026-12-05, the shared 2-core machine at load ~7-8, one thread): 80 epochs at 128 px,
batch 16, object weight 20 (``gains={"obj": 20}``), 2,000 optimizer steps: 29.3 min wall (8.1
CPU-min); F1 0.854 (P 0.919, R 0.799 at conf 0.70), mean localisation error 0.013 of the image
side; every class >= 0.79. Shorter or smaller runs measured on the way: width 1.0, 96 px, 40
epochs, object weight 10: F1 0.48 (class confusion: 54 % of the found centres had the right class);
width 1.0, 128 px, 60 epochs, weight 20: 0.79; width 0.35, 128 px, 30 epochs, weight 100: 0.29.
From scratch FOMO's small stride-8 backbone needs many steps to tell the shapes apart (the
published recipe starts from ImageNet weights). The CI test fits a 16-image slice in under a minute.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreFOMO

QUICK = {"data": "shapes-point", "imgsz": 128, "batch": 16, "nbs": 16, "epochs": 80, "gains": {"obj": 20.0},
         "workers": 0, "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(5400)
def test_fomo_100_finds_shapes_centres_with_f1_over_0_8(tmp_path) -> None:  # noqa: ANN001
    started = time.perf_counter()
    model = LibreFOMO(size="100")
    outcome = model.train(project=str(tmp_path), **QUICK)
    print(f"trained in {(time.perf_counter() - started) / 60:.1f} min: {outcome.summary()}")
    result = model.val(data="shapes-point", imgsz=QUICK["imgsz"], workers=0, verbose=False)
    print(result.table())
    assert result.f1 >= 0.8 and result.mle < 0.025, result.summary()


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(600)
def test_fomo_100_fits_a_shapes_point_slice_in_ci_time(tmp_path) -> None:  # noqa: ANN001
    """The point task's CI learning test: FOMO-100 from scratch fits 16 shapes-point images at
    96 px in 40 epochs (80 steps, no augmentation), validated on the same images. Measured: F1 0.64
    in 35 s beside another training run on the shared 2-core machine; untrained it finds nothing."""
    from libreyolo_models.tasks.point.shapes_point import generate_shapes_point

    generate_shapes_point(tmp_path / "data", split_sizes={"train": 16, "val": 1})
    text = (tmp_path / "data" / "data.yaml").read_text(encoding="utf-8")
    fit = tmp_path / "data" / "fit.yaml"  # validation on the training images: the fit is what is checked
    fit.write_text(text.replace("val: images/val", "val: images/train"), encoding="utf-8")
    model = LibreFOMO(size="100")
    model.train(data=str(fit), imgsz=96, batch=8, nbs=8, epochs=40, lr0=3e-3, warmup_epochs=0, gains={"obj": 20.0},
                scale=0.0, translate=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, fliplr=0.0, workers=0, device="cpu",
                val=False, verbose=False, plots=False, save=False, project=str(tmp_path / "runs"))
    result = model.val(data=str(fit), imgsz=96, workers=0, verbose=False)
    assert result.f1 >= 0.4, result.table()
