"""FOMO's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from ...contract.spec import FamilySpec, TaskDecl

# Edge Impulse's FOMO recipe: Adam at lr 1e-3 from ImageNet MobileNetV2 weights, object cells
# weighted 100x, flips and mild crops / brightness. Here from scratch by default: AdamW with a
# cosine decay, a short warmup, the point task's augmentations (affine scale / translate, HSV,
# flips; no mosaic). The object weight is the ratio of the two loss gains (loss.py).
RECIPE: dict[str, object] = {
    "optimizer": "AdamW", "lr0": 1e-3, "lrf": 0.01, "cos_lr": True, "momentum": 0.9, "weight_decay": 5e-4,
    "warmup_epochs": 1.0, "warmup_bias_lr": 0.0, "nbs": 32, "close_mosaic": 0, "mosaic": 0.0,
    "degrees": 0.0, "translate": 0.1, "scale": 0.3, "shear": 0.0, "hsv_h": 0.015, "hsv_s": 0.5, "hsv_v": 0.3,
    "fliplr": 0.5,
}

SPEC = FamilySpec(
    name="fomo",
    display_name="FOMO",
    weight_prefix="LibreFOMO",
    sizes=("035", "100"),  # MobileNetV2 width 0.35 (FOMO's default) and 1.0
    default_size="035",
    tasks={
        "point": TaskDecl(
            loss_names=("obj", "bg"),
            loss_gains={"obj": 100.0, "bg": 1.0},
            default_imgsz=160,
            default_nc=1,
            inference_capture=True,  # parity row 035 green on the H100 (docs/parity-matrix.md, eighth run)
            train_capture=True,  # parity's training step exact; 20-step numerics exact in fp32 and AMP (H100)
            recipe=RECIPE,
        ),
    },
    implementation="libreyolo_models.families.fomo.family:FOMOFamily",
    stride=8,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=True,  # BatchNorm throughout MobileNetV2, at small per-GPU batches
    summary="FOMO centroid detector (MobileNetV2 0.35 / 1.0 cut at stride 8, per-cell class heatmap)",
)
