"""YOLOv7's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult
from ...errors import CheckpointError
from .loss import Yolo7Loss
from .nn import Yolo7Net, anchors_in_grid_units

# Index of the detect layer -> size: the layer count tells the official graph apart.
SIZE_BY_HEAD = {77: "tiny", 105: "base", 121: "x"}
# hyp.scratch.tiny's obj and cls gains against hyp.scratch.p5's (the declared ones).
_GAIN_FACTORS = {"tiny": {"obj": 1.0 / 0.7, "cls": 0.5 / 0.3}}
_HEAD_WEIGHT = re.compile(r"model\.(\d+)\.m\.0\.weight")


def detect_index(state: Mapping[str, Tensor]) -> int | None:
    """The detect layer's index in a state dict (its output convs' key), or None."""
    found = [int(m.group(1)) for k in state if (m := _HEAD_WEIGHT.fullmatch(k))]
    return max(found) if found else None


class Yolo7Family(DetectorFamily):
    """YOLOv7 detect, sizes tiny/base/x (the detector defaults: seams, NMS over objectness x
    class probability, as the official ``non_max_suppression`` scores, and sample targets). The
    class count comes from the detect layer, whose index depends on the size (``infer_nc``)."""

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

    # Loss --------------------------------------------------------------------------------
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        """hyp.scratch.tiny's obj and cls gains differ from the declared (p5) ones by fixed factors."""
        factors = _GAIN_FACTORS.get(self.size, {})
        box, obj, cls = (gains[k] * factors.get(k, 1.0) for k in ("box", "obj", "cls"))
        return Yolo7Loss(self.nc, anchors_in_grid_units(self.size), box=box, obj=obj, cls=cls)

    def compute_loss(self, outputs: list[Tensor], targets: Tensor, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)
