"""Depth Anything V2's implementation of the family contract: inference only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...errors import CheckpointError, ConfigError
from .nn import ARCHS, DepthAnythingV2

_WIDTH_KEY = "pretrained.cls_token"
_INFERENCE_ONLY = ("Depth Anything V2 is inference-only here: relative-depth training (its affine-invariant loss "
                   "and pseudo-labelled data) is not implemented; use predict")


class DepthAnythingFamily(Family):
    """Depth Anything V2 relative depth, ViT-S / B / L."""

    def build_network(self) -> nn.Module:
        spec = self.spec
        if spec.mean is None or spec.std is None:
            raise ValueError(f"{spec.name}: Depth Anything V2 needs the input normalisation (mean/std) in its spec")
        if self.size not in ARCHS:
            raise ValueError(f"Depth Anything V2 has no size {self.size!r}; sizes: {', '.join(ARCHS)}")
        return DepthAnythingV2(ARCHS[self.size], spec.mean, spec.std)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _WIDTH_KEY not in state:
            raise CheckpointError(f"not a Depth Anything V2 state dict: {_WIDTH_KEY!r} is missing")
        return 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The encoder's width tells the sizes apart (384, 768, 1024)."""
        if _WIDTH_KEY not in state:
            return None
        width = int(state[_WIDTH_KEY].shape[-1])
        return next((size for size, arch in ARCHS.items() if arch.width == width), None)

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B, H, W]`` relative depth at the input's resolution."""
        return net(images)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        raise ConfigError(_INFERENCE_ONLY)

    def compute_loss(self, outputs: Any, targets: Any, ctx: LossContext) -> LossResult:
        raise ConfigError(_INFERENCE_ONLY)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """One ``float32 [H, W]`` depth map per image (network resolution)."""
        return list(outputs.float().unbind(0))

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Relative depth maps (the parity tool's inference rows need none; here for the contract)."""
        return torch.rand((batch, imgsz, imgsz), generator=generator)
