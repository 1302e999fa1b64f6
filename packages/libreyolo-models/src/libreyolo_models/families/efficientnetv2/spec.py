"""EfficientNetV2's declaration: data only (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

if TYPE_CHECKING:
    from ...contract.family import Family


def _implementation() -> type[Family]:
    from .family import EfficientNetV2Family

    return EfficientNetV2Family


SPEC = FamilySpec(
    name="efficientnetv2",
    display_name="EfficientNetV2",
    weight_prefix="LibreEfficientNetV2",
    sizes=("b0", "b1", "b2", "b3"),
    default_size="b0",
    tasks={"classify": classify_task()},
    implementation=_implementation,
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="EfficientNetV2-B0..B3 image classifier (the paper's base network on torchvision's blocks)",
)
