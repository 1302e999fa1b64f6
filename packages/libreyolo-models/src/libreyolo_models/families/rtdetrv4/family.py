"""RT-DETRv4's implementation of the family contract: the shared DETR glue (``detr_family``)
with its network, loss, per-size backbone learning rate, and upstream's raw-checkpoint cleanup."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from ...layers.detr.dfine_net import infer_size
from .loss import make_loss
from .nn import SIZES, build_network

TRAINING_ONLY_PREFIXES = ("encoder.feature_projector.",)  # distillation heads of raw upstream checkpoints


class RTDETRv4Family(DETRFamily):
    """RT-DETRv4 detect, sizes s/m/l/x, built for one input size (``imgsz``, default 640)."""

    backbone_lr_scale = {"s": 0.5, "m": 0.1, "l": 0.05, "x": 0.01}  # DEIM's trainer, which upstream uses

    def build_network(self) -> nn.Module:
        return build_network(self.size, self.nc, self.imgsz)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return make_loss(self.nc, gains)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Drop the training-only feature projector of raw upstream RT-DETRv4 checkpoints."""
        return {k: v for k, v in state.items() if not k.startswith(TRAINING_ONLY_PREFIXES)}

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        size = infer_size(state)
        return size if size in SIZES else None
