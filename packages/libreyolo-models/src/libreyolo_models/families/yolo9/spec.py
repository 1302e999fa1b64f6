"""YOLOv9's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...family_spec import FamilySpec, TaskDecl

if TYPE_CHECKING:
    from ...contract import Family


def _implementation() -> type[Family]:
    from .family import Yolo9Family

    return Yolo9Family


SPEC = FamilySpec(
    name="yolo9",
    display_name="YOLOv9",
    weight_prefix="LibreYOLO9",
    sizes=("t", "s", "m", "c"),
    default_size="t",
    tasks={
        "detect": TaskDecl(
            loss_names=("box", "cls", "dfl"),
            loss_gains={"box": 7.5, "cls": 0.5, "dfl": 1.5},
            default_imgsz=640,
            # Both True because every size is green in docs/parity-matrix.md (H200, torch 2.11).
            inference_capture=True,
            train_capture=True,
        ),
    },
    implementation=_implementation,
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="GELAN detector (YOLOv9), anchor-free head with DFL; task-aligned assignment",
)
