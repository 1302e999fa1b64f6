"""Declarations every image-classifier family shares (data only: no torch import, like ``spec.py``).

A classifier family's ``spec.py`` builds its ``classify`` task with ``classify_task()`` and takes
``IMAGENET_MEAN``/``IMAGENET_STD`` as its input normalisation, so all of them train with one
recipe unless they say otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

from .spec import TaskDecl

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

CLASSIFY_RECIPE: Mapping[str, object] = {
    # AdamW with a cosine schedule and label smoothing trains from scratch and fine-tunes alike;
    # the YOLO warmup's high bias learning rate would wreck a pretrained head, so it starts at 0.
    "optimizer": "AdamW", "lr0": 0.001, "lrf": 0.01, "momentum": 0.9, "weight_decay": 0.05,
    "warmup_epochs": 1.0, "warmup_bias_lr": 0.0, "cos_lr": True, "close_mosaic": 0,
    "hsv_h": 0.015, "hsv_s": 0.4, "hsv_v": 0.4, "fliplr": 0.5, "label_smoothing": 0.1,
}


def classify_task(*, default_imgsz: int = 224, imgsz_by_size: Mapping[str, int] | None = None,
                  recipe: Mapping[str, object] | None = None, half_weights: bool = True) -> TaskDecl:
    """The ``classify`` declaration: one loss term ``cls`` (soft-target cross-entropy), 1000
    ImageNet classes when none are given. Graph capture is verified: on an H200 (torch 2.11,
    2026-12-01) the parity rows of ResNet 18/50, EfficientNetV2-b0, ConvNeXt-tiny and
    MobileNetV4-small are green (docs/parity-matrix.md). fp16 weight copies: each of the four
    runs every convolution and linear layer once a forward, and ``tests/test_half_weights.py``
    holds their AMP steps bit-identical with and without the copies."""
    return TaskDecl(loss_names=("cls",), loss_gains={"cls": 1.0}, default_imgsz=default_imgsz,
                    imgsz_by_size=dict(imgsz_by_size or {}), inference_capture=True, train_capture=True,
                    half_weights=half_weights, recipe={**CLASSIFY_RECIPE, **(recipe or {})}, default_nc=1000)
