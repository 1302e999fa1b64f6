"""RTMDet's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily
from ...contract.family import LossContext, LossResult
from .loss import RTMDetLoss
from .nn import RTMDetNet, decode

# Stem width -> size (the first conv has half the stem's channels); bare state dicts carry no size.
_STEM_SIZES = {12: "t", 16: "s", 24: "m", 32: "l", 40: "x"}
# mmdetection names the head ``bbox_head``; upstream LibreYOLO (and we) call it ``head``.
_LEGACY_PREFIXES = {"bbox_head.": "head."}
_SHARED_CONV = re.compile(r"head\.(cls|reg)_convs\.0\.(\d+)\.conv\.weight")


class RTMDetFamily(DetectorFamily):
    """RTMDet detect, sizes t/s/m/l/x."""

    head_key = "head.rtm_cls.0.weight"

    def build_network(self) -> nn.Module:
        return RTMDetNet(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        key = "backbone.stem.0.conv.weight"
        return _STEM_SIZES.get(int(state[key].shape[0])) if key in state else None

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """mmdetection's ``bbox_head.`` becomes ``head.``; a writer that stored the shared head
        convs only under level 0 gets them copied to levels 1 and 2 (they are one tensor)."""
        fixed: dict[str, Tensor] = {}
        for key, value in state.items():
            for old, new in _LEGACY_PREFIXES.items():
                if key.startswith(old):
                    key = new + key[len(old):]
            fixed[key] = value
        for key, value in list(fixed.items()):
            match = _SHARED_CONV.fullmatch(key)
            if match:
                for level in (1, 2):
                    fixed.setdefault(f"head.{match[1]}_convs.{level}.{match[2]}.conv.weight", value)
        return fixed

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1] -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels (priors
        at cell corners), then sigmoid class scores; all NMS needs, in a fixed shape."""
        return decode(*net.forward_rgb(images))  # type: ignore[operator]

    def training_forward(self, net: nn.Module, images: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """The network half: per-level class logits and pixel distances, nothing data-dependent."""
        return net.forward_rgb(images)  # type: ignore[operator]

    def make_loss(self, gains: Mapping[str, float]) -> RTMDetLoss:
        return RTMDetLoss(self.nc, cls=gains["cls"], box=gains["box"])

    def compute_loss(self, outputs: tuple[list[Tensor], list[Tensor]], targets: Tensor,
                     ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size)
        return LossResult(total, items)
