"""PicoDet's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...contract.spec import FamilySpec
from ...errors import CheckpointError
from ...layers.nms import nms_per_image
from ...layers.targets import random_box_targets
from .loss import PicoDetLoss
from .nn import ARCHS, BINS, PicoDetNet

# Neck width -> size; bare state dicts carry no metadata.
_SIZE_BY_WIDTH = {arch.width: size for size, arch in ARCHS.items()}
_CLASS_KEY = "head.gfl_cls.0.weight"
# Bo396543018's PyTorch PicoDet (mmdetection names) numbers ESNet blocks per stage (2_1 .. 4_3).
_STAGE_BLOCK = re.compile(r"^backbone\.(\d)_(\d+)\.")
_STAGE_OFFSETS = {2: 0, 3: 3, 4: 10}  # first flat block index of stages 2, 3, 4 (3, 7, 3 blocks)


class PicoDetFamily(Family):
    """PicoDet detect, sizes s/m/l."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None) -> None:
        super().__init__(spec, size, task, nc, imgsz)
        self._loss: PicoDetLoss | None = None

    def build_network(self) -> nn.Module:
        return PicoDetNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _CLASS_KEY not in state:
            raise CheckpointError(f"not a PicoDet detection state dict: {_CLASS_KEY!r} is missing")
        return int(state[_CLASS_KEY].shape[0]) - 4 * BINS  # class logits share the conv with 32 box logits

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

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the four raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        if self._loss is None or self._loss.gains != gains:
            self._loss = PicoDetLoss(self.nc, cls=gains["cls"], box=gains["box"], dfl=gains["dfl"])
        total, items = self._loss(outputs, targets, normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size,
                                  global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return nms_per_image(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                             classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
