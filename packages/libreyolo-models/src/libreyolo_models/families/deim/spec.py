"""DEIM's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.detr_decl import FIXED_SIZE_EXPORT_NOTE, deim_recipe
from ...contract.spec import FamilySpec, TaskDecl

# Upstream LibreYOLO's DEIM recipe (its DEIMConfig), as TrainConfig values: AdamW at 4e-4 (beta1
# 0.9), weight decay 1e-4 at a nominal batch of 16, 2 warmup epochs, clipping at 0.1, fp32, EMA.
# Upstream decays by cosine to 50 % over its last 12 epochs after a flat phase; ours spans the
# run (lrf 0.5). Dense one-to-one matching: more targets per image, here from mosaic (DEIM's
# official recipe; upstream LibreYOLO left it for later) in the first 70 % of the run, with
# photometric, zoom (scale) and translation jitter and horizontal flips, as upstream's
# photometric-distort / zoom-out / IoU-crop pipeline does. The per-size backbone learning rate
# (n, s 0.5; m 0.1; l 0.05; x 0.01) is in the family's parameter groups.
RECIPE = deim_recipe(epochs=132, lr0=4e-4, weight_decay=1e-4, nbs=16)

SPEC = FamilySpec(
    name="deim",
    display_name="DEIM",
    weight_prefix="LibreDEIM",
    sizes=("n", "s", "m", "l", "x"),
    default_size="n",
    tasks={
        "detect": TaskDecl(
            loss_names=("mal", "bbox", "giou", "fgl", "ddf"),
            loss_gains={"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5},
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            half_weights=False,
            recipe=RECIPE,
            recipe_shares={"warmup_epochs": 0.3, "close_mosaic": 0.3},
            dynamic_imgsz=False,
            dynamic_imgsz_note=FIXED_SIZE_EXPORT_NOTE,
        ),
    },
    implementation="libreyolo_models.families.deim.family:DEIMFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="D-FINE's network trained with dense one-to-one matching and a matchability-aware loss; "
            "Hungarian matching, NMS-free",
)
