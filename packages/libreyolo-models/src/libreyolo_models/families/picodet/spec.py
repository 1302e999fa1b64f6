"""PicoDet's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import SHORT_RUN_SHARES, FamilySpec, TaskDecl

# Upstream LibreYOLO's PicoDet recipe (its PICODETConfig, after Bo396543018's picodet_s_320_coco)
# as TrainConfig values: SGD (momentum 0.9) at lr 0.1 on a per-positive loss for batches of 16,
# cosine to 0 after one warmup epoch, flips only (no mosaic, affine or colour jitter), 300 epochs.
# Translations (why a number looks odd):
# - lr0: our loss is a per-image sum (x global batch, layers/loss_scale.py) accumulated to nbs=16
#   images per step, so 0.1 / 16 gives upstream's update at its batch of 16, for any batch.
# - weight_decay: rides on the same small lr0; 4e-5 * 16 keeps upstream's decay per step.
# - lrf: cosine to 0 (upstream's min_lr_ratio 0); warmup_bias_lr 0.1 / 16 starts the biases at
#   the base rate (upstream warms every group up alike).
# - max_grad_norm 0: upstream does not clip. The gradient norm of this per-image sum starts near 33
#   at batch 16 (PicoDet-s, 128 px), so the trainer's default clip at 10 would cut the first steps
#   threefold; measured on shapes (CPU, 128 px, 2026-12-04) the clipped run was behind the
#   unclipped one for its first 14 epochs (mAP50 0.067 against 0.11).
# What TrainConfig cannot say (EMA decay 0.9998, upstream's warmup start at 1 % of lr0) is listed
# in docs/families/picodet.md.
RECIPE: dict[str, object] = {
    "epochs": 300, "optimizer": "SGD", "lr0": 0.1 / 16, "nbs": 16, "momentum": 0.9, "weight_decay": 4e-5 * 16,
    "cos_lr": True, "lrf": 0.0, "warmup_epochs": 1.0, "warmup_bias_lr": 0.1 / 16, "warmup_momentum": 0.9,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "translate": 0.0, "scale": 0.0, "shear": 0.0,
    "fliplr": 0.5, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "max_grad_norm": 0.0,
}

SPEC = FamilySpec(
    name="picodet",
    display_name="PicoDet",
    weight_prefix="LibrePICODET",
    sizes=("s", "m", "l"),
    default_size="s",
    tasks={
        "detect": TaskDecl(
            loss_names=("cls", "box", "dfl"),
            loss_gains={"cls": 1.0, "box": 2.0, "dfl": 0.25},  # varifocal, GIoU, DFL (upstream's weights)
            default_imgsz=320,
            imgsz_by_size={"m": 416, "l": 640},
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            # Every BatchNorm folds into its convolution on the inference copy:
            # tests/test_picodet_family.py holds fused detections to the unfused ones.
            inference_fuse=True,
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
        ),
    },
    implementation="libreyolo_models.families.picodet.family:PicoDetFamily",
    # Image sizes must be multiples of 32 (the three-level path aggregation); the fourth head level
    # (stride 64) is a padded stride-2 conv on the stride-32 map and takes any size (416 -> 7 x 7).
    stride=32,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="ESNet + CSP-PAN mobile detector (PicoDet), GFL head with 4 levels; SimOTA assignment, varifocal loss",
)
