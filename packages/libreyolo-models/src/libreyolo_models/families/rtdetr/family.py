"""RT-DETR's implementation of the family contract: the shared DETR glue (``detr_family``: graph
seams, the denoising training head, loss, post-processing, optimizer groups) with RT-DETR's
network, loss, backbone learning rate and size reading."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from ...layers.detr.set_loss import RTDETRLoss
from .nn import RTDETRNet


class RTDETRFamily(DETRFamily):
    """RT-DETR detect, sizes r18/r34/r50/r50m/r101/l/x.

    Training is split: ``training_forward`` (backbone + encoder) is what a CUDA graph may
    capture; ``training_head`` runs the decoder eagerly with this batch's denoising queries.
    RT-DETR builds its anchors from the feature maps at every size (no fixed-size buffers).
    """

    backbone_lr_scale = 0.1  # the official recipe trains the backbone at a tenth of the base rate
    abs_box_sizes = False    # RT-DETR's denoising keeps a crossed box's negative size

    def build_network(self) -> nn.Module:
        return RTDETRNet(self.size, self.nc)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return RTDETRLoss(self.nc, gains)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the backbone's blocks and the widths tell the size."""
        width_key = "encoder.input_proj.0.0.weight"
        if width_key not in state:
            return None
        wide = int(state[width_key].shape[0]) == 384
        if any(k.startswith("backbone.stages.") for k in state):
            return "x" if wide else "l"
        if wide:
            return "r101"
        if any(".branch2c." in k for k in state):
            half = state.get("encoder.fpn_blocks.0.conv1.conv.weight")
            return "r50m" if half is not None and int(half.shape[0]) == 128 else "r50"
        return "r34" if "backbone.res_layers.0.blocks.2.branch2a.conv.weight" in state else "r18"
