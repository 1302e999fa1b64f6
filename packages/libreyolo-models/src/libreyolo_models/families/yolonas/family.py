"""YOLO-NAS's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult, default_parameter_groups
from .loss import YoloNasLoss
from .nn import ARCHS, DETECT_SIZES, YoloNasNet, head_width

# Head-1 stem width -> size (each detect size has its own width multiplier); bare state dicts
# carry no metadata.
_SIZE_BY_HEAD = {head_width(128, ARCHS[size].head_width): size for size in DETECT_SIZES}
_CLASS_KEY = "heads.head1.cls_pred.weight"


class YoloNasFamily(DetectorFamily):
    """YOLO-NAS detect, sizes s/m/l (the detector defaults: seams, NMS, sample targets)."""

    head_key = _CLASS_KEY

    def build_network(self) -> nn.Module:
        return YoloNasNet(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The first head's width tells the size (s 64, m 96, l 128 channels)."""
        key = "heads.head1.stem.seq.conv.weight"
        return _SIZE_BY_HEAD.get(int(state[key].shape[0])) if key in state else None

    # Loss --------------------------------------------------------------------------------
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return YoloNasLoss(self.nc, cls=gains["cls"], iou=gains["iou"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size)
        return LossResult(total, items)

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """The default groups, except that the bottlenecks' residual scales (``alpha``, one number
        each) join the norms: decay would pull each residual toward zero, and SuperGradients keeps
        one-element parameters out of decay."""
        groups = default_parameter_groups(net, weight_decay=weight_decay)
        by_name = {g["group"]: g for g in groups}
        scales = {id(p) for name, p in net.named_parameters() if name.endswith(".alpha")}
        by_name["norm"]["params"] += [p for p in by_name["decay"]["params"] if id(p) in scales]
        by_name["decay"]["params"] = [p for p in by_name["decay"]["params"] if id(p) not in scales]
        return groups
