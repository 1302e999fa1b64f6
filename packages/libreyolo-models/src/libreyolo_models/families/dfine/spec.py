"""D-FINE's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.detr_decl import FIXED_SIZE_EXPORT_NOTE
from ...contract.spec import FamilySpec, TaskDecl

# Upstream LibreYOLO's D-FINE recipe (its DFINEConfig), as TrainConfig values: AdamW at 2e-4
# (beta1 0.9) with weight decay 1e-4 at a nominal batch of 16, 2 warmup epochs, gradients clipped
# to norm 0.1, fp32 (upstream turns AMP off: the decoder clamps to fp16's range), EMA (the
# trainer's), horizontal flips only (no mosaic, colour, scale or geometric augmentation).
# Upstream keeps the rate flat and decays it by cosine to 5 % over the last epochs; our schedule
# has no flat phase, so the cosine spans the run (lrf 0.05). Upstream's multi-scale batches
# (0.75-1.25x, stopped at 85 % of the run) are not used: ours range 0.5-1.5x and never stop.
# The backbone's 0.5x learning rate is in the family's parameter groups (lr_scale).
RECIPE: dict[str, object] = {
    "epochs": 132, "optimizer": "AdamW", "lr0": 2e-4, "lrf": 0.05, "cos_lr": True, "momentum": 0.9,
    "weight_decay": 1e-4, "nbs": 16, "warmup_epochs": 2.0, "max_grad_norm": 0.1, "amp": False,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "translate": 0.0, "scale": 0.0, "shear": 0.0,
    "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "fliplr": 0.5,
}

SPEC = FamilySpec(
    name="dfine",
    display_name="D-FINE",
    weight_prefix="LibreDFINE",
    sizes=("n", "s", "m", "l", "x"),
    default_size="n",
    tasks={
        "detect": TaskDecl(
            loss_names=("vfl", "bbox", "giou", "fgl", "ddf"),
            loss_gains={"vfl": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5},
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            half_weights=False,       # the decoder's heads run once per layer
            recipe=RECIPE,
            recipe_shares={"warmup_epochs": 0.3},
            dynamic_imgsz=False,
            dynamic_imgsz_note=FIXED_SIZE_EXPORT_NOTE,
        ),
    },
    implementation="libreyolo_models.families.dfine.family:DFINEFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="detection transformer (HGNetv2, GELAN hybrid encoder, fine-grained distribution refinement); "
            "Hungarian matching, NMS-free",
)
