"""SegFormer's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# The published recipe (ADE20K / Cityscapes): AdamW, lr 6e-5, weight decay 0.01, the decoder at
# 10x the encoder's learning rate (``parameter_groups``), a poly(1.0) decay to 0 after a linear
# warmup, batch 16. Poly with power 1 is exactly this trainer's linear schedule with lrf=0; it
# steps per epoch here rather than per iteration. Augmentation: random scale 0.5-1.5 around the
# letterbox size, random crop, horizontal flip, mild colour jitter. The lr suits fine-tuning an
# ImageNet-pretrained encoder; from scratch, pass a larger lr0 (about 1e-3, as the learning test does).
RECIPE: dict[str, object] = {
    "optimizer": "AdamW", "lr0": 6e-5, "lrf": 0.0, "cos_lr": False, "momentum": 0.9, "weight_decay": 0.01,
    "warmup_epochs": 1.0, "warmup_momentum": 0.9, "warmup_bias_lr": 0.0, "nbs": 16, "close_mosaic": 0,
    "mosaic": 0.0, "degrees": 0.0, "translate": 0.0, "shear": 0.0, "scale": 0.5, "fliplr": 0.5,
    "hsv_h": 0.015, "hsv_s": 0.5, "hsv_v": 0.3,
}

SPEC = FamilySpec(
    name="segformer",
    display_name="SegFormer",
    weight_prefix="LibreSegFormer",
    sizes=("b0", "b1", "b2", "b3", "b4", "b5"),
    default_size="b0",
    tasks={
        "semantic": TaskDecl(
            loss_names=("ce",),
            loss_gains={"ce": 1.0},
            default_imgsz=512,
            # Verified on an H200 (torch 2.11, 2026-12-01): b0 and b2 rows of docs/parity-matrix.md
            # are green (inference bit-identical fp32/fp16; training step: loss exact or last-bit,
            # no mismatching gradient; drop path and dropout draw from the graph's own stream).
            inference_capture=True,
            train_capture=True,
            # Every conv and linear layer runs once per training forward (test_half_weights:
            # bit-identical AMP steps, drop path included).
            half_weights=True,
            recipe=RECIPE,
        ),
    },
    implementation="libreyolo_models.families.segformer.family:SegFormerFamily",
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="Mix Transformer encoder + all-MLP decoder (SegFormer b0-b5), semantic segmentation",
)
