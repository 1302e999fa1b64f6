"""RF-DETR's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl
from .variants import DETECT, POSE, SEGMENT

# Upstream's fine-tuning recipe as TrainConfig values: AdamW at 1e-4 (momentum = AdamW's beta1,
# 0.9), weight decay 1e-4, a step schedule that drops at epoch 100 of 100 (so: constant, lrf=1), no
# warmup, gradients clipped to norm 0.1, 4 images per step accumulated to 16 (nbs), horizontal
# flips and scale jitter only (no mosaic, rotation, shear or colour jitter). The backbone's
# layer-wise learning rates and the decoder's 0.7x are in the family's parameter_groups.
# Not carried over: upstream's multi-scale training (its sizes around the default, here off like
# every family's default) and its EMA settings (the trainer's EMA is used).
RECIPE: dict[str, object] = {
    "epochs": 100, "optimizer": "AdamW", "lr0": 1e-4, "lrf": 1.0, "cos_lr": False, "momentum": 0.9,
    "weight_decay": 1e-4, "batch": 4, "nbs": 16, "warmup_epochs": 0.0, "max_grad_norm": 0.1,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "shear": 0.0, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0,
}

_FIXED_SIZE_NOTE = ("its ViT position table is resampled, and its memory tokens laid out, for sizes read as Python "
                    "numbers, which the trace freezes at the export's imgsz")

SPEC = FamilySpec(
    name="rfdetr",
    display_name="RF-DETR",
    weight_prefix="LibreRFDETR",
    sizes=tuple(DETECT),
    default_size="n",
    tasks={
        "detect": TaskDecl(
            loss_names=("cls", "bbox", "giou"),
            loss_gains={"cls": 1.0, "bbox": 5.0, "giou": 2.0},
            default_imgsz=DETECT["n"].resolution,
            imgsz_by_size={size: v.resolution for size, v in DETECT.items()},
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            half_weights=False,  # the decoder's query-position MLP and the ViT blocks' norms run per layer
            recipe=RECIPE,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
        ),
        "segment": TaskDecl(
            loss_names=("cls", "bbox", "giou", "mask_ce", "mask_dice"),
            loss_gains={"cls": 5.0, "bbox": 5.0, "giou": 2.0, "mask_ce": 5.0, "mask_dice": 5.0},
            default_imgsz=SEGMENT["n"].resolution,
            imgsz_by_size={size: v.resolution for size, v in SEGMENT.items() if size in DETECT},
            stride=24,  # 12-pixel patches in 2 x 2 windows (n: one window, so 12 would do; 24 fits every size)
            inference_capture=True,  # parity row n green on the H100 (docs/parity-matrix.md, eighth run)
            train_capture=True,  # and its 20-step numerics: eager-noise in fp32 and AMP
            half_weights=False,
            recipe=RECIPE,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
        ),
        "pose": TaskDecl(
            loss_names=("cls", "bbox", "giou", "keypoints_l1", "keypoints_oks", "keypoints_vis"),
            loss_gains={"cls": 1.0, "bbox": 5.0, "giou": 2.0, "keypoints_l1": 10.0, "keypoints_oks": 4.0,
                        "keypoints_vis": 1.0},
            default_imgsz=POSE["n"].resolution,
            imgsz_by_size={size: v.resolution for size, v in POSE.items()},
            inference_capture=True,  # parity row n green on the H100 (docs/parity-matrix.md, eighth run)
            train_capture=True,  # and its 20-step numerics: eager-noise in fp32 and AMP
            half_weights=False,
            recipe=RECIPE,
            dynamic_imgsz=False,
            dynamic_imgsz_note=_FIXED_SIZE_NOTE,
            default_nc=1,  # upstream builds pose for one class (person)
            default_keypoints=17,
        ),
    },
    implementation="libreyolo_models.families.rfdetr.family:RFDETRFamily",
    stride=32,  # detect and pose: 16-pixel patches in 2 x 2 windows (segment declares its own)
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    ddp_autospawn=True,
    sync_bn_default=False,  # no BatchNorm anywhere (LayerNorms only)
    summary="detection transformer on a windowed DINOv2 ViT (LW-DETR decoder, two-stage queries, Group DETR); "
            "Hungarian matching, NMS-free",
)
