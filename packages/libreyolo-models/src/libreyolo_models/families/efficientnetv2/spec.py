"""EfficientNetV2's declaration: data only (no torch import)."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

SPEC = FamilySpec(
    name="efficientnetv2",
    display_name="EfficientNetV2",
    weight_prefix="LibreEfficientNetV2",
    sizes=("b0", "b1", "b2", "b3"),
    default_size="b0",
    tasks={"classify": classify_task()},
    implementation="libreyolo_models.families.efficientnetv2.family:EfficientNetV2Family",
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="EfficientNetV2-B0..B3 image classifier (the paper's base network on torchvision's blocks)",
)
