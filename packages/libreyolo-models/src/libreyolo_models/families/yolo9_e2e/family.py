"""YOLOv9-E2E's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult
from ...errors import CheckpointError
from ...layers.dfl_head import remap_legacy_head_keys
from ...layers.gelan_net import gelan_size_from_state
from .loss import Yolo9E2ELoss
from .nn import Yolo9E2ENet
from .postprocess import postprocess


class Yolo9E2EFamily(DetectorFamily):
    """YOLOv9-E2E detect, sizes t/s/m/c: the detector defaults but a two-branch training seam
    and top-k post-processing (its one-to-one branch needs no NMS)."""

    head_key = "head.one2one_cv3.0.2.weight"

    def build_network(self) -> nn.Module:
        return Yolo9E2ENet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = cls.head_key
        if key not in state:
            raise CheckpointError(f"not a YOLOv9-E2E detection state dict: {key!r} is missing (a plain YOLOv9 "
                                  "checkpoint has no one-to-one head; load it with family='yolo9')")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the stem width and block types tell the size."""
        return gelan_size_from_state(state)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Older upstream files: a ``detect.`` prefix (and YOLOv9's legacy DFL convolution)."""
        return remap_legacy_head_keys(state)

    def head_prefixes(self) -> tuple[str, ...]:
        """Both class outputs start fresh under ``train(pretrained=...)``."""
        return tuple(f"head.{branch}.{level}.2." for branch in ("cv3", "one2one_cv3") for level in range(3))

    # Graph seams -------------------------------------------------------------------------
    def training_forward(self, net: nn.Module, images: Tensor) -> dict[str, list[Tensor]]:
        """The network half: both branches' raw maps, nothing data-dependent."""
        return net.training_outputs(images)  # type: ignore[operator]

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return Yolo9E2ELoss(self.nc, box=gains["box"], cls=gains["cls"], dfl=gains["dfl"])

    def compute_loss(self, outputs: Mapping[str, list[Tensor]], targets: Tensor, ctx: LossContext) -> LossResult:
        floats = {name: [r.float() for r in maps] for name, maps in outputs.items()}
        total, items = self.loss_for(ctx)(floats, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size, global_batch=ctx.global_batch)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """Top-k of the one-to-one scores, no NMS (``options.iou`` and ``agnostic`` do not apply)."""
        return postprocess(outputs.float(), conf=options.conf, max_det=options.max_det, classes=options.classes)
