"""YOLOv9's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily
from ...contract.family import LossContext, LossResult
from .loss import Yolo9Loss
from .nn import Yolo9Net

# Keys older upstream writers used; mapped on load so their files still load unchanged.
_LEGACY_PREFIXES = {"detect.": "head."}
_LEGACY_DROPPED = {"head.dfl.conv.weight"}


class Yolo9Family(DetectorFamily):
    """YOLOv9 detect, sizes t/s/m/c."""

    head_key = "head.cv3.0.2.weight"

    def build_network(self) -> nn.Module:
        return Yolo9Net(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the stem width and block types tell the size."""
        key = "backbone.conv0.conv.weight"
        if key not in state:
            return None
        stem = int(state[key].shape[0])
        if stem == 16:
            return "t"
        if stem == 64:
            return "c"
        return "m" if "backbone.elan1.cv2.0.cv1.conv.weight" in state else "s"

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        fixed: dict[str, Tensor] = {}
        for key, value in state.items():
            for old, new in _LEGACY_PREFIXES.items():
                if key.startswith(old):
                    key = new + key[len(old):]
            if key not in _LEGACY_DROPPED:
                fixed[key] = value
        return fixed

    # Loss (the seams, NMS post-processing and sample targets are the detector defaults) ------
    def make_loss(self, gains: Mapping[str, float]) -> Yolo9Loss:
        return Yolo9Loss(self.nc, box=gains["box"], cls=gains["cls"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)([r.float() for r in outputs], targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)
