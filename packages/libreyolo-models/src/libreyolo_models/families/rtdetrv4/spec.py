"""RT-DETRv4's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.detr_decl import FIXED_SIZE_EXPORT_NOTE, deim_recipe
from ...contract.spec import FamilySpec, TaskDecl

# Upstream LibreYOLO's RT-DETRv4 recipe (its RTDETRv4Config: DEIM's with lr 5e-4, weight decay
# 1.25e-4, 58 epochs), as TrainConfig values; see families/deim/spec.py for how DEIM's schedule
# and augmentation map onto ours. The per-size backbone learning rate is in the parameter groups.
RECIPE = deim_recipe(epochs=58, lr0=5e-4, weight_decay=1.25e-4, nbs=16)

SPEC = FamilySpec(
    name="rtdetrv4",
    display_name="RT-DETRv4",
    weight_prefix="LibreRTDETRv4",
    sizes=("s", "m", "l", "x"),
    default_size="s",
    tasks={
        "detect": TaskDecl(
            loss_names=("mal", "bbox", "giou", "fgl", "ddf"),
            loss_gains={"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5},
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # parity green; 20-step numerics eager-noise in fp32 and AMP (H100, 2026-12-05)
            half_weights=False,
            recipe=RECIPE,
            recipe_shares={"warmup_epochs": 0.3, "close_mosaic": 0.3},
            dynamic_imgsz=False,
            dynamic_imgsz_note=FIXED_SIZE_EXPORT_NOTE,
        ),
    },
    implementation="libreyolo_models.families.rtdetrv4.family:RTDETRv4Family",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="D-FINE's layout with SiLU, trained as DEIM (upstream's RT-DETRv4 students); Hungarian matching, "
            "NMS-free",
)
