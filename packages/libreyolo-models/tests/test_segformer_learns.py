"""Learning works for the semantic task: SegFormer-b0 from scratch on the bundled shapes-seg set, on
the CPU (background and five shape classes).

From scratch, the published fine-tuning lr (6e-5, for an ImageNet-pretrained encoder) is far too
small, so lr0 is 1e-3 (the decoder trains at 10x, as published; above that, training collapsed to
background in the GPU sweeps); everything else is the family's recipe (AdamW, poly decay,
crop/flip/colour augmentation), with a milder random scale.

Issue 16 asks for mIoU >= 0.6. Not reached yet: this configuration ended at 0.485 here
(2026-12-01, 2 CPU threads, 49.5 min while the full test suite ran beside it, about 30 s an epoch
alone; circle 0.61, cross 0.46, square 0.38, triangle 0.31, star 0.17), and the best GPU sweep
(192 px, lr0 7e-4, 90 epochs) 0.549, every curve still rising (docs/benchmarks.md). The test
asserts the level reached and reports the target as an expected failure until it is met.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreSegFormer

TARGET_MIOU = 0.6  # issue 16
REACHED_MIOU = 0.45  # measured 0.485 with QUICK
QUICK = {"data": "shapes-seg", "imgsz": 128, "batch": 8, "nbs": 8, "epochs": 60, "lr0": 1e-3, "scale": 0.25,
         "workers": 1, "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(5400)
def test_segformer_b0_learns_shapes_seg_on_cpu(tmp_path) -> None:
    started = time.perf_counter()
    model = LibreSegFormer(size="b0")
    outcome = model.train(project=str(tmp_path), **QUICK)
    minutes = (time.perf_counter() - started) / 60
    print(f"trained in {minutes:.1f} min: {outcome.summary()}")
    again = model.val(data="shapes-seg", imgsz=QUICK["imgsz"], workers=0, verbose=False)
    assert again.miou >= REACHED_MIOU and again.pixel_accuracy > 0.9, again.table()
    assert min(again.iou.values()) > 0.1, again.table()  # every class is learned, not only the background
    if again.miou < TARGET_MIOU:
        pytest.xfail(f"mIoU {again.miou:.3f}: issue 16's target {TARGET_MIOU} is not reached yet\n{again.table()}")


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(600)
def test_segformer_b0_fits_a_16_image_slice_in_ci_time(tmp_path) -> None:
    """The semantic task's CI learning test (about 45 s on 2 cores): SegFormer-b0 from scratch fits
    16 shapes-seg images at 64 px in 80 optimizer steps, validated on the same images. Predicting
    only the background scores mIoU 0.15 here (1 of 6 classes); the run reached 0.35 on the
    machine it was tuned on, with circle, square and cross above IoU 0.2."""
    from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

    generate_shapes_seg(tmp_path / "data", split_sizes={"train": 16, "val": 1})
    text = (tmp_path / "data" / "data.yaml").read_text(encoding="utf-8")
    fit = tmp_path / "data" / "fit.yaml"  # validation on the training images: the fit is what is checked
    fit.write_text(text.replace("val: images/val", "val: images/train"), encoding="utf-8")
    model = LibreSegFormer(size="b0")
    model.train(data=str(fit), imgsz=64, batch=8, nbs=8, epochs=40, lr0=2e-3, warmup_epochs=0, scale=0.0,
                fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, workers=0, device="cpu", val=False, verbose=False,
                plots=False, save=False, project=str(tmp_path / "runs"))
    fitted = model.val(data=str(fit), imgsz=64, workers=0, verbose=False)
    learned = [c for c, iou in fitted.iou.items() if c != 0 and iou >= 0.2]
    assert fitted.miou >= 0.25 and len(learned) >= 2, fitted.table()
