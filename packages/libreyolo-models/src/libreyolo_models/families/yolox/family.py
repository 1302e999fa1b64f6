"""YOLOX's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily
from ...contract.family import LossContext, LossResult
from .loss import YoloxLoss
from .nn import ARCHS, YoloxNet

# Stem width -> size: what a bare state dict (no metadata) says about itself.
_SIZE_BY_STEM = {arch.width: size for size, arch in ARCHS.items()}


def l1_active(epoch: int, epochs: int, close_mosaic: int) -> bool:
    """Whether YOLOX's L1 term is on at ``epoch``: in the last ``close_mosaic`` epochs, the ones the
    trainer runs without mosaic (upstream's "no augmentation" epochs)."""
    return close_mosaic > 0 and epoch >= epochs - close_mosaic


class YoloxFamily(DetectorFamily):
    """YOLOX detect, sizes n/t/s/m/l/x."""

    head_key = "head.cls_preds.0.weight"

    def build_network(self) -> nn.Module:
        return YoloxNet(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The stem's width tells the size (each size has its own)."""
        key = "backbone.backbone.stem.conv.conv.weight"
        return _SIZE_BY_STEM.get(int(state[key].shape[0])) if key in state else None

    # Loss (the seams, NMS post-processing and sample targets are the detector defaults) ------
    def make_loss(self, gains: Mapping[str, float]) -> YoloxLoss:
        return YoloxLoss(self.nc, iou=gains["iou"], obj=gains["obj"], cls=gains["cls"], l1=gains["l1"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, use_l1=l1_active(ctx.epoch, ctx.epochs, ctx.close_mosaic),
                                          normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size,
                                          global_batch=ctx.global_batch)
        return LossResult(total, items)

    def epoch_start(self, epoch: int, epochs: int, close_mosaic: int = 0) -> str | None:
        """The L1 term switches on at the first mosaic-free epoch: say so, so captured graphs are
        rebuilt for the new loss (the captured forward itself is unchanged)."""
        if epoch > 0 and l1_active(epoch, epochs, close_mosaic) and not l1_active(epoch - 1, epochs, close_mosaic):
            return f"YOLOX L1 loss switched on at epoch {epoch + 1} of {epochs} (mosaic closed)"
        return None
