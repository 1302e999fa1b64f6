"""YOLOX's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...contract.spec import FamilySpec
from ...errors import CheckpointError
from ...layers.targets import random_box_targets
from .loss import YoloxLoss
from .nn import ARCHS, YoloxNet
from .postprocess import postprocess

# Stem width -> size: what a bare state dict (no metadata) says about itself.
_SIZE_BY_STEM = {arch.width: size for size, arch in ARCHS.items()}


def l1_active(epoch: int, epochs: int, close_mosaic: int) -> bool:
    """Whether YOLOX's L1 term is on at ``epoch``: in the last ``close_mosaic`` epochs, the ones the
    trainer runs without mosaic (upstream's "no augmentation" epochs)."""
    return close_mosaic > 0 and epoch >= epochs - close_mosaic


class YoloxFamily(Family):
    """YOLOX detect, sizes n/t/s/m/l/x."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int) -> None:
        super().__init__(spec, size, task, nc)
        self._loss: YoloxLoss | None = None

    def build_network(self) -> nn.Module:
        return YoloxNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "head.cls_preds.0.weight"
        if key not in state:
            raise CheckpointError(f"not a YOLOX detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The stem's width tells the size (each size has its own)."""
        key = "backbone.backbone.stem.conv.conv.weight"
        return _SIZE_BY_STEM.get(int(state[key].shape[0])) if key in state else None

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the three raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        if self._loss is None or self._loss.gains != gains:
            self._loss = YoloxLoss(self.nc, iou=gains["iou"], obj=gains["obj"], cls=gains["cls"], l1=gains["l1"])
        total, items = self._loss(outputs, targets, use_l1=l1_active(ctx.epoch, ctx.epochs, ctx.close_mosaic),
                                  normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size,
                                  global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return postprocess(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                           classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)

    def epoch_start(self, epoch: int, epochs: int, close_mosaic: int = 0) -> str | None:
        """The L1 term switches on at the first mosaic-free epoch: say so, so captured graphs are
        rebuilt for the new loss (the captured forward itself is unchanged)."""
        if epoch > 0 and l1_active(epoch, epochs, close_mosaic) and not l1_active(epoch - 1, epochs, close_mosaic):
            return f"YOLOX L1 loss switched on at epoch {epoch + 1} of {epochs} (mosaic closed)"
        return None
