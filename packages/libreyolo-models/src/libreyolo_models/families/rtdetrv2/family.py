"""RT-DETRv2's implementation of the family contract: the shared DETR glue (``detr_family``) with
RT-DETR's backbone, encoder and loss and the v2 decoder layout."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from .loss import make_loss
from .nn import build_network


class RTDETRv2Family(DETRFamily):
    """RT-DETRv2 detect, sizes r18/r34/r50/r50m/r101, built for one input size (``imgsz``, default 640)."""

    backbone_lr_scale = 0.1  # RT-DETR's recipe
    abs_box_sizes = False    # RT-DETR's denoising

    def build_network(self) -> nn.Module:
        return build_network(self.size, self.nc, self.imgsz)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return make_loss(self.nc, gains)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the backbone's blocks and the widths tell the size."""
        width = state.get("encoder.input_proj.0.0.weight")
        if width is None:
            return None
        if int(width.shape[0]) == 384:
            return "r101"
        if any(".branch2c." in k for k in state):
            half = state.get("encoder.fpn_blocks.0.conv1.conv.weight")
            return "r50m" if half is not None and int(half.shape[0]) == 128 else "r50"
        return "r34" if "backbone.res_layers.0.blocks.2.branch2a.conv.weight" in state else "r18"
