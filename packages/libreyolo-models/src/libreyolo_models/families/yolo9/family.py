"""YOLOv9's declaration (data) and its user-facing class with the graph-seam methods."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import Tensor, nn

from ...errors import CheckpointError
from ...family_spec import FamilySpec
from ...model import LibreYOLO
from .loss import Yolo9Loss
from .nn import Yolo9Net
from .postprocess import postprocess

SPEC = FamilySpec(
    name="yolo9",
    display_name="YOLOv9",
    weight_prefix="LibreYOLO9",
    sizes=("t", "s", "m", "c"),
    default_size="t",
    tasks=("detect",),
    default_imgsz=640,
    # Both True because every size is green in docs/parity-matrix.md (H200, torch 2.11, 2026-11-30).
    inference_capture_verified=True,
    train_capture_verified=True,
    ddp_autospawn=True,
    sync_bn_default=True,
)


class LibreYOLO9(LibreYOLO):
    """YOLOv9 detector: ``LibreYOLO9(size="t", nc=3)`` (untrained) or ``LibreYOLO9("best.pt")``."""

    spec = SPEC
    net: Yolo9Net

    def build_net(self, size: str, nc: int) -> nn.Module:
        self._loss: Yolo9Loss | None = None
        return Yolo9Net(size, nc)

    def infer_nc(self, state: Mapping[str, Tensor]) -> int:
        key = "head.cv3.0.2.weight"
        if key not in state:
            raise CheckpointError(f"not a YOLOv9 detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    def infer_size(self, state: Mapping[str, Tensor], source: str) -> str:
        """Bare state dicts carry no metadata; the stem width and block types tell the size."""
        stem = int(state["backbone.conv0.conv.weight"].shape[0])
        if stem == 16:
            return "t"
        if stem == 64:
            return "c"
        return "m" if "backbone.elan1.cv2.0.cv1.conv.weight" in state else "s"

    # Graph seams -------------------------------------------------------------------------
    def forward_tensors(self, images: Tensor, net: nn.Module | None = None) -> Tensor:
        """Inference seam: ``[B, 3, H, W]`` -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return (net or self.net)(images)["predictions"]

    def train_forward(self, images: Tensor) -> list[Tensor]:
        """Training seam: the network half (the three raw head maps), nothing data-dependent."""
        return self.net.raw_outputs(images)

    def compute_loss(self, raw_outputs: list[Tensor], targets: Tensor, *,
                     normalizer_sum: Callable[[Tensor], Tensor] | None = None, world_size: int = 1,
                     global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """The eager remainder both training paths call: loss and detached [box, cls, dfl] items."""
        if self._loss is None or self._loss.nc != self.nc:
            self._loss = Yolo9Loss(self.nc)
        return self._loss(raw_outputs, targets, normalizer_sum=normalizer_sum, world_size=world_size,
                          global_batch=global_batch)

    loss_names = ("box", "cls", "dfl")

    def postprocess(self, outputs: Tensor, *, conf: float, iou: float, max_det: int,
                    classes: list[int] | None) -> list[Tensor]:
        return postprocess(outputs, conf=conf, iou=iou, max_det=max_det, classes=classes)
