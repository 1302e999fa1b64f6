"""YOLOv7's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...contract.spec import FamilySpec
from ...errors import CheckpointError
from ...layers.targets import random_box_targets
from .loss import Yolo7Loss
from .nn import Yolo7Net, anchors_in_grid_units
from .postprocess import postprocess

# Index of the detect layer -> size: the layer count tells the official graph apart.
SIZE_BY_HEAD = {77: "tiny", 105: "base", 121: "x"}
# hyp.scratch.tiny's obj and cls gains against hyp.scratch.p5's (the declared ones).
_GAIN_FACTORS = {"tiny": {"obj": 1.0 / 0.7, "cls": 0.5 / 0.3}}
_HEAD_WEIGHT = re.compile(r"model\.(\d+)\.m\.0\.weight")


def detect_index(state: Mapping[str, Tensor]) -> int | None:
    """The detect layer's index in a state dict (its output convs' key), or None."""
    found = [int(m.group(1)) for k in state if (m := _HEAD_WEIGHT.fullmatch(k))]
    return max(found) if found else None


class Yolo7Family(Family):
    """YOLOv7 detect, sizes tiny/base/x."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None) -> None:
        super().__init__(spec, size, task, nc, imgsz)
        self._loss: Yolo7Loss | None = None

    def build_network(self) -> nn.Module:
        return Yolo7Net(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        head = detect_index(state)
        if head is None:
            raise CheckpointError("not a YOLOv7 detection state dict: no 'model.<n>.m.0.weight' output conv")
        return int(state[f"model.{head}.m.0.weight"].shape[0]) // 3 - 5

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        head = detect_index(state)
        return None if head is None else SIZE_BY_HEAD.get(head)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Deploy-layout files (``Detect``: no YOLOR implicit layers, cfg/deploy) get the neutral
        ones (``ia`` = 0, ``im`` = 1), which compute the same; other keys pass unchanged."""
        head = detect_index(state)
        out = dict(state)
        if head is None or f"model.{head}.ia.0.implicit" in state:
            return out
        for level in range(3):
            weight = state.get(f"model.{head}.m.{level}.weight")
            if weight is None:
                break
            out[f"model.{head}.ia.{level}.implicit"] = torch.zeros(1, weight.shape[1], 1, 1, dtype=weight.dtype)
        for level in range(3):
            weight = state.get(f"model.{head}.m.{level}.weight")
            if weight is None:
                break
            out[f"model.{head}.im.{level}.implicit"] = torch.ones(1, weight.shape[0], 1, 1, dtype=weight.dtype)
        return out

    def head_prefixes(self) -> tuple[str, ...]:
        head = {v: k for k, v in SIZE_BY_HEAD.items()}[self.size]
        return (f"model.{head}.m.", f"model.{head}.im.")

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The network half: the three raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        factors = _GAIN_FACTORS.get(self.size, {})
        wanted = tuple(gains[k] * factors.get(k, 1.0) for k in ("box", "obj", "cls"))
        if self._loss is None or self._loss.gains != wanted:
            self._loss = Yolo7Loss(self.nc, anchors_in_grid_units(self.size), box=wanted[0], obj=wanted[1],
                                   cls=wanted[2])
        total, items = self._loss(outputs, targets, normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size,
                                  global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return postprocess(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                           classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
