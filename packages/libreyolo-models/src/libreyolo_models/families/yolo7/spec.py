"""YOLOv7's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl

# The official recipe (WongKinYiu/yolov7 data/hyp.scratch.p5.yaml and train.py defaults) in
# TrainConfig's terms. The official loss is a per-image sum (loss x batch size), as this zoo's, so
# lr0 and nbs carry over unchanged: SGD (nesterov) 0.01, momentum 0.937, decay 5e-4 per 64 images,
# 3 warmup epochs (momentum from 0.8, bias lr from 0.1), cosine to lrf 0.1, mosaic on to the end,
# no rotation or shear, translate 0.2, scale 0.9. YOLOv7-tiny's own hyp.scratch.tiny differs in
# lrf (0.01), translate (0.1), scale (0.5), obj/cls gains (1.0/0.5: applied per size by the
# family) and mixup/paste-in (not expressible here); see docs/families/yolo7.md.
RECIPE: dict[str, object] = {
    "optimizer": "SGD", "lr0": 0.01, "lrf": 0.1, "momentum": 0.937, "weight_decay": 5e-4, "nbs": 64,
    "warmup_epochs": 3.0, "warmup_momentum": 0.8, "warmup_bias_lr": 0.1, "cos_lr": True,
    "close_mosaic": 0, "mosaic": 1.0, "degrees": 0.0, "translate": 0.2, "scale": 0.9, "shear": 0.0,
    "fliplr": 0.5, "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4,
}

SPEC = FamilySpec(
    name="yolo7",
    display_name="YOLOv7",
    weight_prefix="LibreYOLO7",
    sizes=("tiny", "base", "x"),
    default_size="base",
    tasks={
        "detect": TaskDecl(
            loss_names=("box", "obj", "cls"),
            # hyp.scratch.p5's gains, before the official per-level / image-size / class scaling
            # (yolo7/loss.py); YOLOv7-tiny multiplies obj and cls to its own 1.0 and 0.5.
            loss_gains={"box": 0.05, "obj": 0.7, "cls": 0.3},
            default_imgsz=640,
            # Not yet verified on a GPU: no parity rows (docs/parity-matrix.md) for this family.
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            # Conv+BN folds, RepConv merges and the implicit layers fold into the output convs;
            # test_yolo7_family holds the fused detections to the unfused ones.
            inference_fuse=True,
            recipe=RECIPE,
        ),
    },
    implementation="libreyolo_models.families.yolo7.family:Yolo7Family",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="E-ELAN detector (YOLOv7, official tiny/base/X layouts), anchor-based IDetect; SimOTA-style lead assignment",
)
