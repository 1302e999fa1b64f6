"""YOLOv9-E2E's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl

SPEC = FamilySpec(
    name="yolo9_e2e",
    display_name="YOLOv9-E2E",
    weight_prefix="LibreYOLO9E2E",
    sizes=("t", "s", "m", "c"),
    default_size="t",
    tasks={
        "detect": TaskDecl(
            # The sum of both branches' terms (upstream reports them the same way).
            loss_names=("box", "cls", "dfl"),
            loss_gains={"box": 7.5, "cls": 0.5, "dfl": 1.5},
            default_imgsz=640,
            # Not yet verified on a GPU: no parity rows (docs/parity-matrix.md) for this family.
            inference_capture=True,  # parity rows green on the H200 (docs/parity-matrix.md)
            train_capture=True,  # and its 20-step numerics certificate (exact / eager-noise)
            # Conv+BN folds and RepConvN merges as in YOLOv9; test_yolo9_e2e_family holds the fused
            # detections to the unfused ones.
            inference_fuse=True,
            # No recipe: upstream trains it with YOLOv9's (TrainConfig's defaults are YOLOv9's).
        ),
    },
    implementation="libreyolo_models.families.yolo9_e2e.family:Yolo9E2EFamily",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    summary="YOLOv9 with a one-to-one head (NMS-free): top-k prediction; dual task-aligned loss",
)
