"""DAMO-YOLO's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import SHORT_RUN_SHARES, FamilySpec, TaskDecl

# Upstream's recipe (tinyvision configs, as upstream LibreYOLO's DAMOYOLOConfig restates them) in
# TrainConfig's terms; translations in docs/families/damoyolo.md:
# - SGD, momentum 0.9; upstream steps 0.01 per 64 images on a mean loss. The loss here is a
#   per-image sum accumulated to nbs=64 images, so upstream's step would be lr0 0.01 / 64; with
#   the trainer's clip at norm 10 that crawled, as it did for YOLOX (measured 2026-12-05, idle-ish
#   2-core CPU, DAMO-YOLO-ns, shapes, 12 epochs at 128 px, batch 16: mAP50 0.006 at 0.01 / 64 against
#   0.302 at 0.01). So lr0 0.01 clipped, and the decay YOLOX's recipe keeps with it (5e-4 x 64).
# - 5 warmup epochs from 0 (bias too), cosine to 5 % (min_lr_ratio 0.05), the last 16 epochs
#   without mosaic; mosaic 1.0, rotation 10, shear 2, translate 0.2, scale (0.1, 2.0) -> 0.9.
RECIPE: dict[str, object] = {
    "optimizer": "SGD", "lr0": 0.01, "nbs": 64, "momentum": 0.9, "weight_decay": 5e-4 * 64,
    "warmup_epochs": 5.0, "warmup_bias_lr": 0.0, "warmup_momentum": 0.9, "cos_lr": True, "lrf": 0.05,
    "close_mosaic": 16, "mosaic": 1.0, "degrees": 10.0, "translate": 0.2, "scale": 0.9, "shear": 2.0,
    "fliplr": 0.5, "max_grad_norm": 10.0,
}

SPEC = FamilySpec(
    name="damoyolo",
    display_name="DAMO-YOLO",
    weight_prefix="LibreDAMOYOLO",
    sizes=("ns", "nm", "nl", "t", "s", "m", "l"),
    default_size="t",
    tasks={
        "detect": TaskDecl(
            loss_names=("cls", "box", "dfl"),
            loss_gains={"cls": 1.0, "box": 2.0, "dfl": 0.25},
            default_imgsz=640,
            imgsz_by_size={"ns": 416, "nm": 416, "nl": 416},
            # Not yet verified on a GPU: no parity rows (docs/parity-matrix.md) for this family.
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            recipe=RECIPE,
            recipe_shares=SHORT_RUN_SHARES,
        ),
    },
    implementation="libreyolo_models.families.damoyolo.family:DamoYoloFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="TinyNAS + RepGFPN detector (DAMO-YOLO), GFL ZeroHead; AlignOTA assignment, QFL + GIoU + DFL",
)
