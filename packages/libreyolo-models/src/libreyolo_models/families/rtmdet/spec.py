"""RTMDet's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import SHORT_RUN_SHARES, FamilySpec, TaskDecl
from .input_stats import MEAN_RGB, STD_RGB

# Upstream's COCO recipe (mmdetection rtmdet_*_8xb32-300e_coco) in TrainConfig's terms: AdamW at
# lr 0.004 for 256 images per step (nbs=256: smaller batches accumulate to it), decay 0.05 on
# conv weights only, warmup from 0 for every group (a YOLO-style bias warmup at lr 0.1 would
# wreck AdamW), cosine down to 5 %, mosaic closed for the last 20 of 300 epochs. What TrainConfig
# cannot say (mixup, cached mosaic, per-size resize ranges, the flat-then-cosine schedule, EMA
# momentum 2e-4) is listed in docs/families/rtmdet.md.
RECIPE: dict[str, object] = {
    "epochs": 300, "optimizer": "AdamW", "lr0": 0.004, "nbs": 256, "momentum": 0.9, "weight_decay": 0.05,
    "cos_lr": True, "lrf": 0.05, "warmup_epochs": 2.0, "warmup_bias_lr": 0.0,
    "mosaic": 1.0, "close_mosaic": 20, "fliplr": 0.5, "degrees": 0.0, "shear": 0.0,
}

SPEC = FamilySpec(
    name="rtmdet",
    display_name="RTMDet",
    weight_prefix="LibreRTMDet",
    sizes=("t", "s", "m", "l", "x"),
    default_size="s",
    tasks={
        "detect": TaskDecl(
            loss_names=("cls", "box"),
            loss_gains={"cls": 1.0, "box": 2.0},  # quality focal loss, GIoU (upstream's weights)
            default_imgsz=640,
            # H200, torch 2.11, 2026-12-01 (docs/parity-matrix.md): rows t and s green, inference
            # and training (every gradient and buffer bit-identical). The training rows were red
            # until libreyolo-cudagraph stopped leaving stand-ins in the head's shared convs.
            inference_capture=True,
            train_capture=True,
            # No fp16 weight copies: the head's cls/reg convs serve every level (three calls a
            # forward), and a copy's three fp16 gradients would add in fp16 (test_half_weights).
            half_weights=False,
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
        ),
    },
    implementation="libreyolo_models.families.rtmdet.family:RTMDetFamily",
    stride=32,
    mean=MEAN_RGB,
    std=STD_RGB,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="CSPNeXt detector (RTMDet), shared-conv separated-BN head; dynamic soft-label assignment",
)
