"""The FOMO network: a MobileNetV2 cut at stride 8 and a 1x1 head giving a class heatmap per cell.

FOMO (Edge Impulse, 2022) localises objects by their centroids only: the image is divided into
8x8-pixel cells and each cell is classified as background or one of the classes, so an object is
the cell (or cells) its centre falls in. The published design: MobileNetV2 (width multiplier
``alpha``, 0.35 by default) cut after the expansion layer of its seventh inverted residual block
(Keras' ``block_6_expand_relu``: stride 8, ``6 * 32 * alpha`` channels rounded as MobileNetV2
rounds), then a 1x1 convolution to 32 channels with ReLU and a 1x1 convolution to ``nc + 1``
logits (background first), softmaxed per cell.

The backbone is torchvision's MobileNetV2 (``torchvision.models.mobilenet_v2``): its first seven
``features`` blocks plus the expansion layer of the eighth, under ``backbone.0`` ..
``backbone.7`` (torchvision's ``features.<i>`` keys for the first seven, ``features.7.conv.0``
for the last), so torchvision's MobileNetV2 weights can be mapped onto it. BatchNorm and ReLU6 as
torchvision builds them. The head's keys are ours (``head.0``, ``head.2``). Input normalisation
(ImageNet mean / std, as torchvision's MobileNetV2 expects) is the first layer, inside the graph.
"""

from __future__ import annotations

from torch import Tensor, nn
from torchvision.models import mobilenet_v2

from ...layers.normalize import InputNormalize

HEAD_WIDTH = 32  # the published head's hidden 1x1 convolution
OUTPUT_STRIDE = 8
WIDTHS = {"035": 0.35, "100": 1.0}  # size name -> MobileNetV2 width multiplier (timm's naming: mobilenetv2_035)


def truncated_mobilenet_v2(width: float) -> tuple[nn.Sequential, int]:
    """MobileNetV2 blocks up to stride 8, ending with the next block's 1x1 expansion (ReLU6), and
    the channels it gives."""
    features = mobilenet_v2(width_mult=width).features
    expansion = features[7].conv[0]  # Conv2dNormActivation: conv, BatchNorm, ReLU6
    return nn.Sequential(*features[:7], expansion), int(expansion[0].out_channels)


class FOMONet(nn.Module):
    """``[B, 3, H, W]`` RGB in [0, 1] (H, W multiples of 8) -> ``[B, nc + 1, H/8, W/8]`` logits,
    channel 0 the background."""

    def __init__(self, width: float, nc: int, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        self.normalize = InputNormalize(mean, std)
        self.backbone, channels = truncated_mobilenet_v2(width)
        self.head = nn.Sequential(nn.Conv2d(channels, HEAD_WIDTH, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(HEAD_WIDTH, nc + 1, 1))

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.backbone(self.normalize(images)))
