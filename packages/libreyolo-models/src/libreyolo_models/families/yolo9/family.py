"""YOLOv9's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily
from ...contract.family import LossContext, LossResult
from ...layers.dfl_head import remap_legacy_head_keys
from ...layers.gelan_net import gelan_size_from_state
from .loss import Yolo9Loss
from .nn import Yolo9Net


class Yolo9Family(DetectorFamily):
    """YOLOv9 detect, sizes t/s/m/c."""

    head_key = "head.cv3.0.2.weight"

    def build_network(self) -> nn.Module:
        return Yolo9Net(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the stem width and block types tell the size."""
        return gelan_size_from_state(state)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Older upstream files: a ``detect.`` prefix and a fixed DFL convolution (dropped)."""
        return remap_legacy_head_keys(state)

    # Loss (the seams, NMS post-processing and sample targets are the detector defaults) ------
    def make_loss(self, gains: Mapping[str, float]) -> Yolo9Loss:
        return Yolo9Loss(self.nc, box=gains["box"], cls=gains["cls"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)([r.float() for r in outputs], targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)
