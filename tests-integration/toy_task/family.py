"""The toy counter: a few convolutions, a global pool and one regression output per image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from libreyolo_models import Family, LossContext, LossResult
from libreyolo_models.layers.conv import Conv


class CountNet(nn.Module):
    def __init__(self, nc: int) -> None:
        super().__init__()
        self.body = nn.Sequential(Conv(3, 16, 3, 2), Conv(16, 32, 3, 2), Conv(32, 32, 3, 2), Conv(32, 64, 3, 2))
        self.head = nn.Linear(64, 1)
        self.nc = nc

    def forward(self, x: Tensor) -> Tensor:
        """``[B, 1]``: the predicted number of objects."""
        return self.head(self.body(x).mean((2, 3)))


class CountFamily(Family):
    def build_network(self) -> nn.Module:
        return CountNet(self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        return 5

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        return net(images)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        mse = F.mse_loss(outputs.float()[:, 0], targets.to(outputs.device).float()) * ctx.gains["mse"]
        return LossResult(mse, mse.detach().reshape(1))

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return list(outputs.float()[:, 0].clamp(min=0))

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 6, (batch,), generator=generator).float()
