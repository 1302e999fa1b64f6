"""ConvNeXt: torchvision's network, with the input normalisation inside it.

Subclassing keeps torchvision's module names, so ``torchvision.models.convnext_tiny().state_dict()``
loads key for key; the normalisation layer has only non-persistent buffers.
"""

from __future__ import annotations

from torch import Tensor
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

from ...layers.normalize import InputNormalize

# size -> (channels per stage, blocks per stage, stochastic depth), as in the ConvNeXt paper.
ARCHITECTURES = {
    "tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1),
    "small": ((96, 192, 384, 768), (3, 3, 27, 3), 0.4),
    "base": ((128, 256, 512, 1024), (3, 3, 27, 3), 0.5),
}


class ConvNeXtNet(ConvNeXt):
    """RGB ``[B, 3, H, W]`` in [0, 1] -> logits ``[B, nc]``."""

    def __init__(self, size: str, nc: int, mean: tuple[float, float, float],
                 std: tuple[float, float, float]) -> None:
        widths, depths, drop_path = ARCHITECTURES[size]
        stages = [CNBlockConfig(w, widths[i + 1] if i + 1 < len(widths) else None, d)
                  for i, (w, d) in enumerate(zip(widths, depths))]
        super().__init__(stages, stochastic_depth_prob=drop_path, num_classes=nc)
        self.normalize = InputNormalize(mean, std)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(self.normalize(x))
