"""YOLOv9's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract import Family, LossContext, LossResult
from ...errors import CheckpointError
from ...family_spec import FamilySpec
from ...layers.dfl_head import remap_legacy_head_keys
from ...layers.gelan_net import gelan_size_from_state
from ...layers.targets import random_box_targets
from .loss import Yolo9Loss
from .nn import Yolo9Net
from .postprocess import postprocess


class Yolo9Family(Family):
    """YOLOv9 detect, sizes t/s/m/c."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int) -> None:
        super().__init__(spec, size, task, nc)
        self._loss: Yolo9Loss | None = None

    def build_network(self) -> nn.Module:
        return Yolo9Net(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "head.cv3.0.2.weight"
        if key not in state:
            raise CheckpointError(f"not a YOLOv9 detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the stem width and block types tell the size."""
        return gelan_size_from_state(state)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Older upstream files: a ``detect.`` prefix and a fixed DFL convolution (dropped)."""
        return remap_legacy_head_keys(state)

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the three raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        if self._loss is None or (self._loss.box, self._loss.cls, self._loss.dfl) != (
                gains["box"], gains["cls"], gains["dfl"]):
            self._loss = Yolo9Loss(self.nc, box=gains["box"], cls=gains["cls"], dfl=gains["dfl"])
        total, items = self._loss([r.float() for r in outputs], targets, normalizer_sum=ctx.normalizer_sum,
                                  world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return postprocess(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                           classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
