"""YOLO-NAS's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import SHORT_RUN_SHARES, FamilySpec, TaskDecl

# Upstream LibreYOLO's YOLO-NAS recipe (its YOLONASConfig, after SuperGradients' COCO recipe) as
# TrainConfig values: AdamW at lr 5e-4 with decay 1e-5 for batches of 16 (nbs), cosine down to 10 %
# after one warmup epoch that starts near 0 for every group (warmup_bias_lr 0: AdamW, no YOLO-style
# bias warmup), no mosaic, translation 0.25, scale +/- 0.5, flips, HSV jitter, fp32 (amp off), 300
# epochs, gradients unclipped (max_grad_norm 0: upstream does not clip). What TrainConfig cannot say
# (mixup at 0.5, EMA decay 0.9997, the HSV probability 0.5) is listed in docs/families/yolonas.md.
# The loss is a per-target mean (see loss.py): AdamW's steps do not depend on its scale, so the
# learning rate carries over unchanged.
RECIPE: dict[str, object] = {
    "epochs": 300, "optimizer": "AdamW", "lr0": 5e-4, "nbs": 16, "momentum": 0.9, "weight_decay": 1e-5,
    "cos_lr": True, "lrf": 0.1, "warmup_epochs": 1.0, "warmup_bias_lr": 0.0, "warmup_momentum": 0.9,
    "mosaic": 0.0, "close_mosaic": 0, "degrees": 0.0, "translate": 0.25, "scale": 0.5, "shear": 0.0,
    "fliplr": 0.5, "amp": False, "max_grad_norm": 0.0,
}

# YOLO-NAS-Pose's published recipe (SuperGradients' yolo_nas_pose_*): the detector's optimizer
# settings with weight decay 1e-6, and its loss gains (class 1.0, CIoU 2.5, DFL 0.01, keypoint
# visibility 1.0, keypoint OKS regression 34.0; see pose_loss.py).
POSE_RECIPE: dict[str, object] = {**RECIPE, "weight_decay": 1e-6}

SPEC = FamilySpec(
    name="yolonas",
    display_name="YOLO-NAS",
    weight_prefix="LibreYOLONAS",
    sizes=("n", "s", "m", "l"),  # n is YOLO-NAS-Pose's alone
    default_size="s",
    tasks={
        "detect": TaskDecl(
            loss_names=("cls", "iou", "dfl"),
            loss_gains={"cls": 1.0, "iou": 2.5, "dfl": 0.5},  # upstream's (PP-YOLOE's) weights
            default_imgsz=640,
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            # QARepVGG branches and every BatchNorm fold into single convolutions on the inference
            # copy: tests/test_yolonas_family.py holds fused detections to the unfused ones.
            inference_fuse=True,
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
            sizes=("s", "m", "l"),
        ),
        "pose": TaskDecl(
            loss_names=("cls", "iou", "dfl", "pose_cls", "pose_reg"),
            loss_gains={"cls": 1.0, "iou": 2.5, "dfl": 0.01, "pose_cls": 1.0, "pose_reg": 34.0},
            default_imgsz=640,
            default_nc=1,  # one class (person): the class head's first output
            default_keypoints=17,
            inference_capture=True,  # parity row n green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics: exact in fp32 and AMP
            # The same folding as the detector's: tests/test_yolonas_pose_task.py holds the fused
            # copy's boxes and keypoints to the branches'.
            inference_fuse=True,
            recipe=POSE_RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
            sizes=("n", "s", "m", "l"),
        ),
    },
    implementation="libreyolo_models.families.yolonas.family:YoloNasFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary=("QARepVGG detector (YOLO-NAS), PAN neck, DFL heads; task-aligned assignment, varifocal loss; "
             "YOLO-NAS-Pose: keypoint heads, OKS-aware assignment"),
)
