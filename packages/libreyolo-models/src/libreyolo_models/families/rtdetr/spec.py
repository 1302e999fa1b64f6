"""RT-DETR's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl
from ...layers.detr.rtdetr_sizes import VARIANTS

# The official RT-DETR recipe, as TrainConfig values: AdamW at a constant 1e-4 (lrf=1: no decay;
# momentum is AdamW's beta1) with weight decay 1e-4 at its nominal batch of 16 (nbs), no warmup,
# gradients clipped to norm 0.1, EMA (the trainer's, decay 0.9999), no mosaic, no rotation or shear.
# The backbone's 0.1x learning rate is in the family's parameter_groups (lr_scale).
RECIPE: dict[str, object] = {
    "epochs": 72, "optimizer": "AdamW", "lr0": 1e-4, "lrf": 1.0, "cos_lr": False, "momentum": 0.9,
    "weight_decay": 1e-4, "nbs": 16, "warmup_epochs": 0.0, "max_grad_norm": 0.1,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "shear": 0.0,
}

SPEC = FamilySpec(
    name="rtdetr",
    display_name="RT-DETR",
    weight_prefix="LibreRTDETR",
    sizes=tuple(VARIANTS),
    default_size="r18",
    tasks={
        "detect": TaskDecl(
            loss_names=("vfl", "bbox", "giou"),
            loss_gains={"vfl": 1.0, "bbox": 5.0, "giou": 2.0},
            default_imgsz=640,
            # Verified on an H200 (torch 2.11, 2026-12-01): r18 and r50 rows of docs/parity-matrix.md
            # are green (inference bit-identical fp32/fp16; split-capture training step: loss exact,
            # no mismatching gradient), and graphed predict equals eager (tests-integration).
            inference_capture=True,
            train_capture=True,
            # No fp16 weight copies: the decoder's query_pos_head runs once per decoder layer, and
            # a copy's fp16 gradients would add in fp16 (test_half_weights).
            half_weights=False,
            recipe=RECIPE,
            dynamic_imgsz=False,
            # flatten_memory reads the level sizes as ints (split sizes, per-level sampling grids).
            dynamic_imgsz_note="its encoder anchors and the deformable attention's per-level sampling are laid "
                               "out from feature-map sizes read as Python numbers, which the trace freezes at "
                               "the export's imgsz",
        ),
    },
    implementation="libreyolo_models.families.rtdetr.family:RTDETRFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="detection transformer (ResNet-vd / HGNetv2, hybrid encoder, deformable decoder); "
            "Hungarian matching, NMS-free",
)
