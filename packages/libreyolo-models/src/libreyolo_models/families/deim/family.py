"""DEIM's implementation of the family contract: the shared DETR glue (``detr_family``) with
DEIM's network, loss and per-size backbone learning rate."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from ...layers.detr.dfine_net import infer_size
from .loss import make_loss
from .nn import build_network


class DEIMFamily(DETRFamily):
    """DEIM detect, sizes n/s/m/l/x, built for one input size (``imgsz``, default 640)."""

    backbone_lr_scale = {"n": 0.5, "s": 0.5, "m": 0.1, "l": 0.05, "x": 0.01}  # upstream's per-size table

    def build_network(self) -> nn.Module:
        return build_network(self.size, self.nc, self.imgsz)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return make_loss(self.nc, gains)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        return infer_size(state)
