"""RT-DETRv2's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.detr_decl import FIXED_SIZE_EXPORT_NOTE
from ...contract.spec import FamilySpec, TaskDecl

# Upstream trains RT-DETRv2 with RT-DETR's trainer: RT-DETR's official recipe (families/rtdetr/spec.py),
# AdamW at a constant 1e-4, weight decay 1e-4 at a nominal batch of 16, clipping at 0.1, EMA, no
# mosaic; the backbone's 0.1x learning rate is in the parameter groups.
RECIPE: dict[str, object] = {
    "epochs": 72, "optimizer": "AdamW", "lr0": 1e-4, "lrf": 1.0, "cos_lr": False, "momentum": 0.9,
    "weight_decay": 1e-4, "nbs": 16, "warmup_epochs": 0.0, "max_grad_norm": 0.1,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "shear": 0.0,
}

SPEC = FamilySpec(
    name="rtdetrv2",
    display_name="RT-DETRv2",
    weight_prefix="LibreRTDETRv2",
    sizes=("r18", "r34", "r50", "r50m", "r101"),
    default_size="r18",
    tasks={
        "detect": TaskDecl(
            loss_names=("vfl", "bbox", "giou"),
            loss_gains={"vfl": 1.0, "bbox": 5.0, "giou": 2.0},
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # parity green; 20-step numerics eager-noise in AMP (fp32 not yet measured)
            half_weights=False,       # the query position head runs once per decoder layer
            recipe=RECIPE,
            dynamic_imgsz=False,
            dynamic_imgsz_note=FIXED_SIZE_EXPORT_NOTE,
        ),
    },
    implementation="libreyolo_models.families.rtdetrv2.family:RTDETRv2Family",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="detection transformer v2 (ResNet-vd, hybrid encoder, per-level deformable sampling); "
            "Hungarian matching, NMS-free",
)
