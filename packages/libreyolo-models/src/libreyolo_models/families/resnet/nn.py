"""ResNet: torchvision's network, with the input normalisation inside it.

Subclassing keeps torchvision's module names, so its state dicts (``torchvision.models.resnet50()
.state_dict()``) are ours key for key; the normalisation layer has only non-persistent buffers.
"""

from __future__ import annotations

from torch import Tensor
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

from ...layers.normalize import InputNormalize

# size -> (block, blocks per stage), as in the ResNet paper's table 1.
ARCHITECTURES = {
    "18": (BasicBlock, (2, 2, 2, 2)),
    "34": (BasicBlock, (3, 4, 6, 3)),
    "50": (Bottleneck, (3, 4, 6, 3)),
    "101": (Bottleneck, (3, 4, 23, 3)),
}


class ResNetNet(ResNet):
    """RGB ``[B, 3, H, W]`` in [0, 1] -> logits ``[B, nc]``."""

    def __init__(self, size: str, nc: int, mean: tuple[float, float, float],
                 std: tuple[float, float, float]) -> None:
        block, layers = ARCHITECTURES[size]
        super().__init__(block, list(layers), num_classes=nc)
        self.normalize = InputNormalize(mean, std)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(self.normalize(x))
