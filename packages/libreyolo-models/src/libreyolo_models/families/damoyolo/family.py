"""DAMO-YOLO's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...contract.spec import FamilySpec
from ...errors import CheckpointError
from ...layers.conv import BN_EPS
from ...layers.repconv import fold_rep_branches
from ...layers.targets import random_box_targets
from .loss import DamoYoloLoss
from .nn import ARCHS, DamoYoloNet
from .postprocess import postprocess

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


class DamoYoloFamily(Family):
    """DAMO-YOLO detect, sizes ns/nm/nl/t/s/m/l."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None) -> None:
        super().__init__(spec, size, task, nc, imgsz)
        self._loss: DamoYoloLoss | None = None

    def build_network(self) -> nn.Module:
        return DamoYoloNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "head.gfl_cls.0.weight"
        if key not in state:
            raise CheckpointError(f"not a DAMO-YOLO detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

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

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1] -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the three raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        wanted = (gains["cls"], gains["box"], gains["dfl"])
        if self._loss is None or self._loss.gains != wanted:
            self._loss = DamoYoloLoss(self.nc, ARCHS[self.size].reg_max, cls=wanted[0], box=wanted[1], dfl=wanted[2])
        total, items = self._loss([o.float() for o in outputs], targets, normalizer_sum=ctx.normalizer_sum,
                                  world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return postprocess(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                           classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
