"""MobileNetV4's declaration: data only (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

if TYPE_CHECKING:
    from ...contract.family import Family


def _implementation() -> type[Family]:
    from .family import MobileNetV4Family

    return MobileNetV4Family


SPEC = FamilySpec(
    name="mobilenetv4",
    display_name="MobileNetV4",
    weight_prefix="LibreMobileNetV4",
    sizes=("small", "medium", "large"),
    default_size="small",
    tasks={"classify": classify_task()},
    implementation=_implementation,
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="MobileNetV4-Conv image classifier (universal inverted bottlenecks; timm's state-dict layout)",
)
