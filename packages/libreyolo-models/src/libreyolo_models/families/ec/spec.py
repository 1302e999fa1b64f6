"""EC's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import SHORT_RUN_SHARES, FamilySpec, TaskDecl
from .variants import VARIANTS

# Upstream's (EdgeCrafter's published S/M) fine-tuning recipe as TrainConfig values: AdamW 5e-4
# (momentum = beta1 0.9), weight decay 1e-4, 2 warmup epochs, then flat and cosine down to half
# (here: cosine to lrf 0.5), 74 epochs of which the last 4 without mosaic, gradients clipped to
# norm 0.1; mosaic 0.75, flips, rotation up to 10 degrees, translation 0.1, colour jitter. The
# backbone's 0.05x learning rate (0.01x for l and x) is in the family's parameter_groups.
# Not carried over: MixUp (the detect pipeline has none) and the flat phase before the cosine.
RECIPE: dict[str, object] = {
    "epochs": 74, "optimizer": "AdamW", "lr0": 5e-4, "lrf": 0.5, "cos_lr": True, "momentum": 0.9,
    "weight_decay": 1e-4, "batch": 16, "nbs": 16, "warmup_epochs": 2.0, "warmup_bias_lr": 0.0,
    "max_grad_norm": 0.1, "mosaic": 0.75, "close_mosaic": 4, "degrees": 10.0, "translate": 0.1, "shear": 0.0,
}

_FIXED_SIZE_NOTE = ("its deformable attention and query selection lay out the memory tokens from feature-map sizes "
                    "read as Python numbers, which the trace freezes at the export's imgsz")

SPEC = FamilySpec(
    name="ec",
    display_name="EC",
    weight_prefix="LibreEC",
    sizes=tuple(VARIANTS),
    default_size="s",
    tasks={
        "detect": TaskDecl(
            loss_names=("mal", "bbox", "giou", "fgl", "ddf"),
            loss_gains={"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5},
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 and the H100 (docs/parity-matrix.md)
            # Parity green; 20-step numerics eager-noise in fp32 and AMP (grid_sample's atomic backward).
            train_capture=True,
            half_weights=False,  # the decoder's heads run once per layer on shared weights
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
        ),
        # Upstream's segment criterion: detection's terms at other gains plus point-sampled masks.
        "segment": TaskDecl(
            loss_names=("mal", "bbox", "giou", "fgl", "ddf", "mask_ce", "mask_dice"),
            loss_gains={"mal": 2.0, "bbox": 1.0, "giou": 1.0, "fgl": 0.15, "ddf": 1.5, "mask_ce": 5.0,
                        "mask_dice": 5.0},
            default_imgsz=640,
            inference_capture=True,  # parity row s green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # parity green; 20-step numerics eager-noise in fp32 and AMP
            half_weights=False,
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
        ),
        # DETRPose's criterion (EC pose is a DETRPose model): varifocal classes, keypoint L1, OKS.
        "pose": TaskDecl(
            loss_names=("vfl", "keypoints", "oks"),
            loss_gains={"vfl": 2.0, "keypoints": 10.0, "oks": 4.0},
            default_imgsz=640,
            inference_capture=True,  # parity row s green on the H100 (docs/parity-matrix.md, seventh run)
            train_capture=True,  # parity's training step green; 20-step numerics eager-noise in fp32 and AMP (H100)
            half_weights=False,
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
            default_nc=1,  # one class, person (its second output is never a target)
            default_keypoints=17,
        ),
    },
    implementation="libreyolo_models.families.ec.family:ECFamily",
    stride=32,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="ViT (RoPE, register token) + hybrid encoder + D-FINE-style decoder (EdgeCrafter); "
            "Hungarian matching, NMS-free",
)
