"""DEIMv2's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.detr_decl import FIXED_SIZE_EXPORT_NOTE, deim_recipe
from ...contract.spec import FamilySpec, TaskDecl
from .sizes import SIZES

# Upstream LibreYOLO's DEIMv2 recipes, as TrainConfig values. Upstream's differ by size (lr 2e-3
# atto, 1.6e-3 femto/pico, 8e-4 n, 5e-4 s-x; weight decay 1e-4, 1.25e-4 for l/x); a recipe here is
# one per task, so it takes the s-x values (set lr0 for the small sizes). AdamW, clipping at 0.1,
# fp32, EMA, and DEIM's dense one-to-one augmentation (see families/deim/spec.py); the cosine
# spans the run to 50 % (upstream: flat, then cosine over the last epochs). The per-size backbone
# learning rate and the late switch to IoU-ordered matching are in the family.
RECIPE = deim_recipe(epochs=132, lr0=5e-4, weight_decay=1e-4, nbs=32)

SPEC = FamilySpec(
    name="deimv2",
    display_name="DEIMv2",
    weight_prefix="LibreDEIMv2",
    sizes=tuple(SIZES),
    default_size="atto",
    tasks={
        "detect": TaskDecl(
            loss_names=("mal", "bbox", "giou", "fgl", "ddf"),
            loss_gains={"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5},
            default_imgsz=640,
            imgsz_by_size={name: size.imgsz for name, size in SIZES.items() if size.imgsz != 640},
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            half_weights=False,
            recipe=RECIPE,
            recipe_shares={"warmup_epochs": 0.3, "close_mosaic": 0.3},
            dynamic_imgsz=False,
            dynamic_imgsz_note=FIXED_SIZE_EXPORT_NOTE,
        ),
    },
    implementation="libreyolo_models.families.deimv2.family:DEIMv2Family",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="DEIM with DINOv3-style ViT (s-x) or tiny HGNetv2 (atto-n) backbones and an RMSNorm decoder; "
            "Hungarian matching, NMS-free",
)
