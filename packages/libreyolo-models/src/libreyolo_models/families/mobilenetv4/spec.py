"""MobileNetV4's declaration: data only (no torch import)."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

SPEC = FamilySpec(
    name="mobilenetv4",
    display_name="MobileNetV4",
    weight_prefix="LibreMobileNetV4",
    sizes=("small", "medium", "large"),
    default_size="small",
    tasks={"classify": classify_task()},
    implementation="libreyolo_models.families.mobilenetv4.family:MobileNetV4Family",
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="MobileNetV4-Conv image classifier (universal inverted bottlenecks; timm's state-dict layout)",
)
