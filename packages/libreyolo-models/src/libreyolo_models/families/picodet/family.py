"""PicoDet's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult
from .loss import PicoDetLoss
from .nn import ARCHS, BINS, PicoDetNet

# Neck width -> size; bare state dicts carry no metadata.
_SIZE_BY_WIDTH = {arch.width: size for size, arch in ARCHS.items()}
_CLASS_KEY = "head.gfl_cls.0.weight"
# Bo396543018's PyTorch PicoDet (mmdetection names) numbers ESNet blocks per stage (2_1 .. 4_3).
_STAGE_BLOCK = re.compile(r"^backbone\.(\d)_(\d+)\.")
_STAGE_OFFSETS = {2: 0, 3: 3, 4: 10}  # first flat block index of stages 2, 3, 4 (3, 7, 3 blocks)


class PicoDetFamily(DetectorFamily):
    """PicoDet detect, sizes s/m/l (the detector defaults but the inference seam)."""

    head_key = _CLASS_KEY
    head_extra_classes = 4 * BINS  # the class logits share their conv with 32 box logits

    def build_network(self) -> nn.Module:
        return PicoDetNet(self.size, self.nc)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The neck's width tells the size (s 96, m 128, l 160)."""
        key = "neck.trans.0.conv.weight"
        return _SIZE_BY_WIDTH.get(int(state[key].shape[0])) if key in state else None

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Bo396543018's mmdetection names -> ours: ``bbox_head.`` is ``head.``, ``backbone.<stage>_<i>.``
        is ``backbone.blocks.<n>.``, ``neck.trans.trans.`` is ``neck.trans.``, the excitation convs
        lose mmcv's ``.conv`` wrapper; its EMA copies and the DFL projection buffer are dropped."""
        fixed: dict[str, Tensor] = {}
        for key, value in state.items():
            if key.startswith("ema_") or key.endswith("integral.project"):
                continue
            if key.startswith("bbox_head."):
                key = "head." + key[len("bbox_head."):]
            match = _STAGE_BLOCK.match(key)
            if match and int(match[1]) in _STAGE_OFFSETS:
                key = f"backbone.blocks.{_STAGE_OFFSETS[int(match[1])] + int(match[2]) - 1}." + key[match.end():]
            key = key.replace("neck.trans.trans.", "neck.trans.")
            key = re.sub(r"\.se\.conv([12])\.conv\.", r".se.conv\1.", key)
            fixed[key] = value
        return fixed

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1] -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then
        sigmoid class scores (all NMS needs)."""
        return net.predictions(images)  # type: ignore[operator]

    # Loss --------------------------------------------------------------------------------
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return PicoDetLoss(self.nc, cls=gains["cls"], box=gains["box"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)
