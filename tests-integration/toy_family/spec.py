"""The toy family's declaration (data)."""

from __future__ import annotations

from libreyolo_models import FamilySpec, TaskDecl


def _implementation():  # noqa: ANN202 - a loader, as the registry expects
    from .family import ToyFamily

    return ToyFamily


SPEC = FamilySpec(
    name="toydet",
    display_name="ToyDet",
    weight_prefix="LibreToyDet",
    sizes=("n", "s"),
    default_size="n",
    tasks={"detect": TaskDecl(loss_names=("iou", "cls"), loss_gains={"iou": 2.0, "cls": 1.0}, default_imgsz=96,
                              recipe={"optimizer": "AdamW", "lr0": 0.003, "mosaic": 0.0, "warmup_epochs": 0.0})},
    implementation=_implementation,
    stride=32,
    ddp_autospawn=True,
    summary="a five-conv, one-level anchor-free detector for tests",
)
