"""Segment Anything's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from ...contract.spec import FamilySpec, TaskDecl

SPEC = FamilySpec(
    name="sam",
    display_name="SAM",
    weight_prefix="LibreSAM",
    sizes=("b", "l", "h"),  # ViT-B / ViT-L / ViT-H image encoders (Apache-2.0)
    default_size="b",
    tasks={
        "prompt-segment": TaskDecl(
            loss_names=(),
            default_imgsz=1024,  # the published input side (64 x 64 patches of 16)
            default_nc=1,        # masks have no classes; one nominal class
            # The image encoder is captured (static shapes, no host syncs); the prompt encoder and
            # mask decoder run eagerly per prompt set. Parity row b green on the H100 (eighth run).
            inference_capture=True,
            train_capture=False,
            exportable=False,
            export_note=("the exported seam would be the image encoder alone: the prompt encoder and mask decoder "
                         "run eagerly per prompt set, and no exporter writes that pair yet"),
        ),
    },
    implementation="libreyolo_models.families.sam.family:SamFamily",
    stride=16,  # the ViT's patch
    mean=IMAGENET_MEAN,  # upstream's pixel_mean / 255 (123.675, 116.28, 103.53)
    std=IMAGENET_STD,    # upstream's pixel_std / 255 (58.395, 57.12, 57.375)
    ddp_autospawn=False,  # inference only
    sync_bn_default=False,  # no BatchNorm
    summary="Segment Anything (ViT-B/L/H image encoder + prompt encoder + mask decoder; Meta's key layout; "
            "points/boxes prompts; inference only)",
    weights_note=("SAM's weights are Meta's files (sam_vit_b_01ec64.pth, sam_vit_l_0b3195.pth, sam_vit_h_4b8939.pth "
                  "from the segment-anything repository's README), loaded by path as they are: "
                  "LibreYOLO('sam_vit_b_01ec64.pth', family='sam')"),
)
