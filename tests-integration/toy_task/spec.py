"""The toy counting family's declaration (data)."""

from __future__ import annotations

from libreyolo_models import FamilySpec, TaskDecl

SPEC = FamilySpec(
    name="toycount",
    display_name="ToyCount",
    weight_prefix="LibreToyCount",
    sizes=("n",),
    default_size="n",
    tasks={"count": TaskDecl(loss_names=("mse",), loss_gains={"mse": 1.0}, default_imgsz=64, default_nc=5,
                             recipe={"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 0.0})},
    implementation="toy_task.family:CountFamily",
    stride=32,
    summary="a four-conv object counter for tests",
)
