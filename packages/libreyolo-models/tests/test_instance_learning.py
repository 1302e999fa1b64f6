"""Learning works for the instance tasks, from scratch on the CPU, through ``LibreYOLO.train``:
EC-s on the bundled ``shapes-inst`` (masks), RF-DETR-n and EC-s on ``shapes-pose`` (house corners).

Settings for a transformer from scratch: AdamW at 1e-3 with the backbone at 1x (the recipes' slow
backbone rates are for pretrained ViTs: ``family.backbone_lr_scale`` / ``encoder_lr_scale`` and
``layer_decay``), 20 EC denoising queries (10 for pose) instead of upstream's ~100, RF-DETR's
training queries cut to 20 in 2 groups, no mosaic, rotation or colour jitter. The model is saved
and reloaded before training, so those knobs survive (an untrained model is re-initialised from
the training seed when ``train`` starts).

These tests fit four images at 64 px in 150 optimizer steps (150 epochs of one step, every batch
the whole set; ``save=False``: writing ``last.pt`` and ``best.pt`` after each of those epochs was
85 % of the pose test's time) and validate on the same images: they check that the whole path learns (targets, matching, the mask or keypoint loss, post-processing,
the COCO metric). Measured on this machine (2026-12-05, one thread, a 2-core machine shared with
four other jobs): EC-s segment mask mAP50 0.60 (box mAP50 1.00), 0.41 s of CPU a step; RF-DETR-n
pose OKS mAP50 1.00 (mAP50-95 0.96), 0.33 s a step; EC-s pose OKS mAP50 1.00 (mAP50-95 0.91),
2.3 s a step (its decoder attends over 60 persons x 18 tokens). Issue 41's targets are on held-out
images (mask mAP50 and OKS mAP50 >= 0.5): see docs/families/ec.md for the held-out runs measured
here and what a GPU run needs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from libreyolo_models import LibreYOLO

FIT = {"imgsz": 64, "batch": 4, "nbs": 4, "epochs": 150, "lr0": 1e-3, "warmup_epochs": 1, "mosaic": 0.0,
       "degrees": 0.0, "close_mosaic": 0, "scale": 0.0, "translate": 0.0, "fliplr": 0.0, "hsv_h": 0.0, "hsv_s": 0.0,
       "hsv_v": 0.0, "workers": 0, "device": "cpu", "val": False, "verbose": False, "plots": False, "save": False}


def fit_data(task: str, root: Path, images: int = 4) -> Path:
    """The first ``images`` training images of the bundled set, validated on themselves."""
    from libreyolo_models.tasks.pose.shapes_pose import ensure_shapes_pose
    from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst

    sizes = {"train": images, "val": 1}
    path = ensure_shapes_inst(root, split_sizes=sizes) if task == "segment" else ensure_shapes_pose(root, split_sizes=sizes)
    text = path.read_text().replace("val: annotations/val.json", "val: annotations/train.json")
    text = text.replace("val: images/val\n", "val: images/train\n").replace("val: images/val}", "val: images/train}")
    fitted = path.parent / "fit.yaml"
    fitted.write_text(text)
    return fitted


def from_scratch(arch: str, task: str, imgsz: int, tmp_path: Path) -> LibreYOLO:
    """An untrained model with the settings of the module docstring, saved and reloaded. Its random
    start is seeded: a saved model keeps its weights when training starts, so an unseeded start
    made every run a different one (EC-s segment mask mAP50 0.44 to 0.70 over three runs)."""
    torch.manual_seed(0)
    model = LibreYOLO(arch, task=task, nc=1 if task == "pose" else 5, imgsz=imgsz)
    if task == "pose":
        model._replace(model._model.rebuilt(keypoints=5, names={0: "house"}), "the houses' five corners")
    model.save(tmp_path / "init.pt")
    model = LibreYOLO(str(tmp_path / "init.pt"))
    family: Any = model.family
    if hasattr(family, "backbone_lr_scale"):  # EC
        family.backbone_lr_scale, family.num_denoising, family.pose_denoising = 1.0, 20, 10
    else:  # RF-DETR
        family.encoder_lr_scale = family.layer_decay = 1.0
        model.net.set_training_queries(queries=20, groups=2)
    return model


def fit(arch: str, task: str, tmp_path: Path) -> Any:
    data = fit_data(task, tmp_path / "data")
    model = from_scratch(arch, task, 64, tmp_path)
    started = time.perf_counter()
    model.train(data=str(data), project=str(tmp_path / "runs"), **FIT)
    metrics = model.val(data=str(data), imgsz=64, batch=4, workers=0, verbose=False)
    print(f"{arch} {task}: {(time.perf_counter() - started) / 60:.1f} min, {metrics.summary()}")
    return metrics


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(900)
def test_ec_segment_fits_four_shapes_inst_images(tmp_path: Path) -> None:
    """The segment task's CI learning test. Measured from the seeded start: mask mAP50 0.55, box
    mAP50 1.00 (2026-12-05); mask mAP50 0.50, box mAP50 1.00 on another CPU (2026-12-06, 2.0 min
    with ``save=False`` on a 2-core machine running a second test; 4.5 min with checkpoints)."""
    metrics = fit("LibreECs.yaml", "segment", tmp_path)
    assert metrics.box.map50 >= 0.8 and metrics.map50 >= 0.4, metrics.table()


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(900)
def test_rfdetr_pose_fits_four_shapes_pose_images(tmp_path: Path) -> None:
    """The pose task's CI learning test. Measured from the seeded start: OKS mAP50 1.00 (mAP50-95
    0.98) (2026-12-05); OKS mAP50 0.94 (mAP50-95 0.78) on another CPU (2026-12-06, 1.3 min with
    ``save=False`` on a 2-core machine running a second test; 5 to 7 min with checkpoints)."""
    metrics = fit("LibreRFDETRn.yaml", "pose", tmp_path)
    assert metrics.map50 >= 0.8 and metrics.map50_95 >= 0.5, metrics.table()


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
def test_ec_pose_fits_four_shapes_pose_images(tmp_path: Path) -> None:
    """EC pose (DETRPose's criterion and keypoint denoising) learns too, at 2.3 s of CPU a step:
    about 6 min; measured OKS mAP50 1.00 (mAP50-95 0.91)."""
    metrics = fit("LibreECs.yaml", "pose", tmp_path)
    assert metrics.map50 >= 0.8, metrics.table()
