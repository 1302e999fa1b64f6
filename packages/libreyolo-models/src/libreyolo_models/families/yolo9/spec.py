"""YOLOv9's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl, WeightsEntry

# Upstream LibreYOLO's published detect weights (COCO, 80 classes), one hub repo per size. sha256 is
# None because the files could not be read when this table was written (the hub was out of reach);
# meanwhile each download is checked against the LFS sha256 the hub publishes for the file. Record the
# real digests here (sha256 of each file) once they can be read: the table's digest then wins.
WEIGHTS = (
    WeightsEntry(size="t", task="detect", file="LibreYOLO9t.pt",
                 url="LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt", sha256=None),
    WeightsEntry(size="s", task="detect", file="LibreYOLO9s.pt",
                 url="LibreYOLO/LibreYOLO9s/resolve/main/LibreYOLO9s.pt", sha256=None),
    WeightsEntry(size="m", task="detect", file="LibreYOLO9m.pt",
                 url="LibreYOLO/LibreYOLO9m/resolve/main/LibreYOLO9m.pt", sha256=None),
    WeightsEntry(size="c", task="detect", file="LibreYOLO9c.pt",
                 url="LibreYOLO/LibreYOLO9c/resolve/main/LibreYOLO9c.pt", sha256=None),
)

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
            # Every conv runs once per training forward: tests/test_half_weights.py holds the
            # parameters after AMP steps bit-identical with and without the fp16 copies.
            half_weights=True,
            # Conv+BN folds and RepConvN merges; tests/test_fused_inference.py holds the fused
            # detections to the unfused ones. H200, YOLOv9-t b1 640: network 27 -> ~12 ms eager.
            inference_fuse=True,
        ),
    },
    implementation="libreyolo_models.families.yolo9.family:Yolo9Family",
    stride=32,
    ddp_autospawn=True,
    sync_bn_default=True,
    weights=WEIGHTS,
    summary="GELAN detector (YOLOv9), anchor-free head with DFL; task-aligned assignment",
)
