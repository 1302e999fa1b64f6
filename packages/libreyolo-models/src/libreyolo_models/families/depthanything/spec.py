"""Depth Anything V2's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from ...contract.spec import FamilySpec, TaskDecl

SPEC = FamilySpec(
    name="depthanything",
    display_name="Depth Anything V2",
    weight_prefix="LibreDepthAnythingV2",
    sizes=("s", "b", "l"),  # ViT-S / ViT-B / ViT-L (the Apache-2.0 small; base and large are CC-BY-NC-4.0)
    default_size="s",
    tasks={
        "depth": TaskDecl(
            loss_names=(),
            default_imgsz=518,  # the official input size: the short side is resized to it
            default_nc=1,       # relative depth has no classes; one nominal class
            inference_capture=True,  # parity row s green on the H100 (docs/parity-matrix.md, eighth run)
            train_capture=False,
            exportable=False,
            export_note=("each picture is resized keeping its aspect ratio, so the network's input size changes "
                         "from picture to picture, and DINOv2 resamples its position table with scale factors "
                         "computed from that size in Python, which a trace would freeze at one size"),
        ),
    },
    implementation="libreyolo_models.families.depthanything.family:DepthAnythingFamily",
    stride=14,  # the ViT's patch
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=False,  # inference only
    sync_bn_default=False,  # no BatchNorm
    summary="Depth Anything V2 relative depth (DINOv2 ViT-S/B/L + DPT head; official key layout; inference only)",
)
