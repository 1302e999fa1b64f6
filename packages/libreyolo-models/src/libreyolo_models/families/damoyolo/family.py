"""DAMO-YOLO's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult
from ...layers.conv import BN_EPS
from ...layers.repconv import fold_rep_branches
from .loss import DamoYoloLoss
from .nn import ARCHS, DamoYoloNet

_BN_KEYS = ("weight", "bias", "running_mean", "running_var")
# Head width at stride 8 -> size, nano (reg_max 7: 32 box channels) and the others apart.
_NANO_BY_WIDTH = {40: "ns", 64: "nm", 80: "nl"}


def fold_branch_layout(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Fold every RepVGG block saved in branch form (``<p>.rbr_dense.{conv,bn}``, ``<p>.rbr_1x1``,
    tinyvision's training layout) into ``<p>.rbr_reparam.{weight,bias}``, the layout this family
    and upstream LibreYOLO build. Other keys pass unchanged, in order."""
    prefixes = [k[: -len(".rbr_dense.conv.weight")] for k in state if k.endswith(".rbr_dense.conv.weight")]
    if not prefixes:
        return dict(state)
    folded: dict[str, Tensor] = {}
    for p in prefixes:
        def bn(branch: str, p: str = p) -> dict[str, Tensor]:
            return {k: state[f"{p}.{branch}.bn.{k}"] for k in _BN_KEYS}

        identity = bn("rbr_identity") if f"{p}.rbr_identity.bn.weight" in state else None
        dense_w = state[f"{p}.rbr_dense.conv.weight"]
        kernel, bias = fold_rep_branches((dense_w, bn("rbr_dense")), (state[f"{p}.rbr_1x1.conv.weight"], bn("rbr_1x1")),
                                         identity, eps=BN_EPS)
        folded[f"{p}.rbr_reparam.weight"] = kernel.to(dense_w.dtype)
        folded[f"{p}.rbr_reparam.bias"] = bias.to(dense_w.dtype)
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        owner = next((p for p in prefixes if key.startswith(p + ".rbr_")), None)
        if owner is None:
            out[key] = value
        elif key == f"{owner}.rbr_dense.conv.weight":  # the folded pair takes the branches' place
            out[f"{owner}.rbr_reparam.weight"] = folded[f"{owner}.rbr_reparam.weight"]
            out[f"{owner}.rbr_reparam.bias"] = folded[f"{owner}.rbr_reparam.bias"]
    return out


class DamoYoloFamily(DetectorFamily):
    """DAMO-YOLO detect, sizes ns/nm/nl/t/s/m/l (the detector defaults: seams, NMS, sample
    targets; one candidate per prior, where upstream's ``multiclass_nms`` lets a prior enter once
    per class above ``conf``)."""

    head_key = "head.gfl_cls.0.weight"

    def build_network(self) -> nn.Module:
        return DamoYoloNet(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The head's input width, its bin count and the backbone kind tell the size."""
        cls_key, reg_key = "head.gfl_cls.0.weight", "head.gfl_reg.0.weight"
        if cls_key not in state or reg_key not in state:
            return None
        width = int(state[cls_key].shape[1])
        if int(state[reg_key].shape[0]) == 4 * (ARCHS["ns"].reg_max + 1):
            return _NANO_BY_WIDTH.get(width)
        if width == 64:
            return "t"
        if not any(k.startswith("backbone.csp_stage.") for k in state):
            return "s" if width == 128 else None
        # m and l differ in depth: l's first CSP stage holds two residual blocks.
        return "l" if any(k.startswith("backbone.csp_stage.1.convstem.1.") for k in state) else "m"

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Files in the branch layout (``rbr_dense``/``rbr_1x1``) are folded into ``rbr_reparam``."""
        return fold_branch_layout(state)

    def head_prefixes(self) -> tuple[str, ...]:
        return ("head.gfl_cls.",)

    # Loss --------------------------------------------------------------------------------
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return DamoYoloLoss(self.nc, ARCHS[self.size].reg_max, cls=gains["cls"], box=gains["box"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)([o.float() for o in outputs], targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)
