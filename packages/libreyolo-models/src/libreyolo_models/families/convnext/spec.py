"""ConvNeXt's declaration: data only (no torch import)."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD, classify_task
from ...contract.spec import FamilySpec

SPEC = FamilySpec(
    name="convnext",
    display_name="ConvNeXt",
    weight_prefix="LibreConvNeXt",
    sizes=("tiny", "small", "base"),
    default_size="tiny",
    tasks={"classify": classify_task()},
    implementation="libreyolo_models.families.convnext.family:ConvNeXtFamily",
    stride=32,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=False,
    summary="ConvNeXt image classifier (torchvision's network; its state dicts load unchanged)",
)
