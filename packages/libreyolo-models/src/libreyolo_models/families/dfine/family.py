"""D-FINE's implementation of the family contract: the shared DETR glue (``detr_family``) with
D-FINE's network, loss, backbone learning rate and size reading."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from ...layers.detr.dfine_net import infer_size
from .loss import make_loss
from .nn import build_network


class DFINEFamily(DETRFamily):
    """D-FINE detect, sizes n/s/m/l/x, built for one input size (``imgsz``, default 640)."""

    backbone_lr_scale = 0.5  # upstream's fine-tune recipe

    def build_network(self) -> nn.Module:
        return build_network(self.size, self.nc, self.imgsz)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return make_loss(self.nc, gains)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        return infer_size(state)

