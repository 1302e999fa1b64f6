"""YOLO-NAS's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult, default_parameter_groups
from ...contract.spec import FamilySpec
from ...errors import CheckpointError
from ...layers.nms import nms_per_image
from ...layers.targets import random_box_targets
from .loss import YoloNasLoss
from .nn import ARCHS, DETECT_SIZES, YoloNasNet, head_width

# Head-1 stem width -> size (each detect size has its own width multiplier); bare state dicts
# carry no metadata.
_SIZE_BY_HEAD = {head_width(128, ARCHS[size].head_width): size for size in DETECT_SIZES}
_CLASS_KEY = "heads.head1.cls_pred.weight"


class YoloNasFamily(Family):
    """YOLO-NAS detect, sizes s/m/l."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None) -> None:
        super().__init__(spec, size, task, nc, imgsz)
        self._loss: YoloNasLoss | None = None

    def build_network(self) -> nn.Module:
        return YoloNasNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _CLASS_KEY not in state:
            raise CheckpointError(f"not a YOLO-NAS detection state dict: {_CLASS_KEY!r} is missing")
        return int(state[_CLASS_KEY].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The first head's width tells the size (s 64, m 96, l 128 channels)."""
        key = "heads.head1.stem.seq.conv.weight"
        return _SIZE_BY_HEAD.get(int(state[key].shape[0])) if key in state else None

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1] -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the three raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        if self._loss is None or self._loss.gains != gains:
            self._loss = YoloNasLoss(self.nc, cls=gains["cls"], iou=gains["iou"], dfl=gains["dfl"])
        total, items = self._loss(outputs, targets, normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return nms_per_image(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                             classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """The default groups, except that the bottlenecks' residual scales (``alpha``, one number
        each) join the norms: decay would pull each residual toward zero, and SuperGradients keeps
        one-element parameters out of decay."""
        groups = default_parameter_groups(net, weight_decay=weight_decay)
        by_name = {g["group"]: g for g in groups}
        scales = {id(p) for name, p in net.named_parameters() if name.endswith(".alpha")}
        by_name["norm"]["params"] += [p for p in by_name["decay"]["params"] if id(p) in scales]
        by_name["decay"]["params"] = [p for p in by_name["decay"]["params"] if id(p) not in scales]
        return groups
