"""FOMO's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...errors import CheckpointError
from .loss import fomo_loss, target_map
from .nn import OUTPUT_STRIDE, WIDTHS, FOMONet
from .postprocess import decode_points

HEAD_KEY = "head.2.weight"  # the class output: [nc + 1, 32, 1, 1]
_FIRST_CONV = "backbone.0.0.weight"


class FOMOFamily(Family):
    """FOMO point detection at MobileNetV2 widths 0.35 and 1.0."""

    def build_network(self) -> nn.Module:
        spec = self.spec
        if spec.mean is None or spec.std is None:
            raise ValueError(f"{spec.name}: FOMO needs the input normalisation (mean/std) in its spec")
        if self.size not in WIDTHS:
            raise ValueError(f"FOMO has no size {self.size!r}; sizes: {', '.join(WIDTHS)}")
        return FOMONet(WIDTHS[self.size], self.nc, spec.mean, spec.std)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if HEAD_KEY not in state:
            raise CheckpointError(f"not a FOMO state dict: {HEAD_KEY!r} is missing")
        return int(state[HEAD_KEY].shape[0]) - 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The stem's width tells the sizes apart (16 channels at 0.35, 32 at 1.0)."""
        if _FIRST_CONV not in state:
            return None
        return {16: "035", 32: "100"}.get(int(state[_FIRST_CONV].shape[0]))

    def head_prefixes(self) -> tuple[str, ...]:
        return ("head.2.",)

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B, nc + 1, H/8, W/8]`` per-cell probabilities (softmax in the graph)."""
        return net(images).softmax(1)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, nc + 1, H/8, W/8]`` logits."""
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        b, _, h, w = outputs.shape
        obj, bg = fomo_loss(outputs, target_map(targets, b, h, w, outputs.device))
        items = torch.stack((obj * float(gains["obj"]), bg * float(gains["bg"])))
        return LossResult(items.sum(), items.detach())

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        conf = float(getattr(options, "conf", 0.25))
        max_det = int(getattr(options, "max_det", 300))
        return decode_points(outputs, conf=conf, max_det=max_det, stride=OUTPUT_STRIDE,
                             classes=getattr(options, "classes", None))

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """1-3 random points per image: ``float32 [M, 4]`` rows (image, class, x, y normalised)."""
        counts = torch.randint(1, 4, (batch,), generator=generator)
        image = torch.repeat_interleave(torch.arange(batch), counts).float()
        cls = torch.randint(0, self.nc, (len(image),), generator=generator).float()
        xy = torch.rand((len(image), 2), generator=generator)
        return torch.cat((image[:, None], cls[:, None], xy), dim=1)
