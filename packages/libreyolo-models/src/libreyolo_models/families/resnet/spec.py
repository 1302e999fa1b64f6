"""ResNet's declaration: data only (no torch import)."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

SPEC = FamilySpec(
    name="resnet",
    display_name="ResNet",
    weight_prefix="LibreResNet",
    sizes=("18", "34", "50", "101"),
    default_size="50",
    tasks={"classify": classify_task()},
    implementation="libreyolo_models.families.resnet.family:ResNetFamily",
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="ResNet image classifier (torchvision's network; its state dicts load unchanged)",
)
