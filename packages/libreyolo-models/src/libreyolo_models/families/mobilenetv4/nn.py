"""MobileNetV4-Conv-S/M/L (Qin et al., 2024), written from the paper's architecture tables.

Each stage is a list of blocks: ``("conv", kernel, stride, out)``, ``("fused", kernel, stride,
out, expand)`` or ``("uib", start kernel, mid kernel, stride, out, expand)`` (0: no such
depthwise conv). After the stages: global average pooling, a 1x1 conv to 1280 features with
BN and ReLU, dropout, the classifier. torchvision has no MobileNetV4; the state-dict layout is
timm's (see ``blocks``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.normalize import InputNormalize
from .blocks import ConvBlock, FusedInvertedBottleneck, UniversalInvertedBottleneck

Block = tuple

_SMALL: tuple[tuple[Block, ...], ...] = (
    (("conv", 3, 2, 32), ("conv", 1, 1, 32)),
    (("conv", 3, 2, 96), ("conv", 1, 1, 64)),
    (("uib", 5, 5, 2, 96, 3.0),) + (("uib", 0, 3, 1, 96, 2.0),) * 4 + (("uib", 3, 0, 1, 96, 4.0),),
    (("uib", 3, 3, 2, 128, 6.0), ("uib", 5, 5, 1, 128, 4.0), ("uib", 0, 5, 1, 128, 4.0),
     ("uib", 0, 5, 1, 128, 3.0), ("uib", 0, 3, 1, 128, 4.0), ("uib", 0, 3, 1, 128, 4.0)),
    (("conv", 1, 1, 960),),
)
_MEDIUM: tuple[tuple[Block, ...], ...] = (
    (("fused", 3, 2, 48, 4.0),),
    (("uib", 3, 5, 2, 80, 4.0), ("uib", 3, 3, 1, 80, 2.0)),
    (("uib", 3, 5, 2, 160, 6.0), ("uib", 3, 3, 1, 160, 4.0), ("uib", 3, 3, 1, 160, 4.0),
     ("uib", 3, 5, 1, 160, 4.0), ("uib", 3, 3, 1, 160, 4.0), ("uib", 3, 0, 1, 160, 4.0),
     ("uib", 0, 0, 1, 160, 2.0), ("uib", 3, 0, 1, 160, 4.0)),
    (("uib", 5, 5, 2, 256, 6.0), ("uib", 5, 5, 1, 256, 4.0), ("uib", 3, 5, 1, 256, 4.0),
     ("uib", 3, 5, 1, 256, 4.0), ("uib", 0, 0, 1, 256, 4.0), ("uib", 3, 0, 1, 256, 4.0),
     ("uib", 3, 5, 1, 256, 2.0), ("uib", 5, 5, 1, 256, 4.0), ("uib", 0, 0, 1, 256, 4.0),
     ("uib", 0, 0, 1, 256, 4.0), ("uib", 5, 0, 1, 256, 2.0)),
    (("conv", 1, 1, 960),),
)
_LARGE: tuple[tuple[Block, ...], ...] = (
    (("fused", 3, 2, 48, 4.0),),
    (("uib", 3, 5, 2, 96, 4.0), ("uib", 3, 3, 1, 96, 4.0)),
    (("uib", 3, 5, 2, 192, 4.0),) + (("uib", 3, 3, 1, 192, 4.0),) * 3 + (("uib", 3, 5, 1, 192, 4.0),)
    + (("uib", 5, 3, 1, 192, 4.0),) * 5 + (("uib", 3, 0, 1, 192, 4.0),),
    (("uib", 5, 5, 2, 512, 4.0),) + (("uib", 5, 5, 1, 512, 4.0),) * 3 + (("uib", 5, 0, 1, 512, 4.0),
     ("uib", 5, 3, 1, 512, 4.0), ("uib", 5, 0, 1, 512, 4.0), ("uib", 5, 0, 1, 512, 4.0),
     ("uib", 5, 3, 1, 512, 4.0), ("uib", 5, 5, 1, 512, 4.0)) + (("uib", 5, 0, 1, 512, 4.0),) * 3,
    (("conv", 1, 1, 960),),
)

# size -> (stem width, stages, dropout before the classifier)
ARCHITECTURES = {"small": (32, _SMALL, 0.2), "medium": (32, _MEDIUM, 0.2), "large": (24, _LARGE, 0.2)}
HEAD_FEATURES = 1280


def _block(cin: int, spec: Block) -> tuple[nn.Module, int]:
    kind = spec[0]
    if kind == "conv":
        _, kernel, stride, cout = spec
        return ConvBlock(cin, cout, kernel, stride), cout
    if kind == "fused":
        _, kernel, stride, cout, expand = spec
        return FusedInvertedBottleneck(cin, cout, kernel, stride, expand), cout
    _, start, mid, stride, cout, expand = spec
    return UniversalInvertedBottleneck(cin, cout, start, mid, stride, expand), cout


class MobileNetV4Net(nn.Module):
    """RGB ``[B, 3, H, W]`` in [0, 1] -> logits ``[B, nc]``."""

    def __init__(self, size: str, nc: int, mean: tuple[float, float, float],
                 std: tuple[float, float, float]) -> None:
        super().__init__()
        stem, stages, dropout = ARCHITECTURES[size]
        self.normalize = InputNormalize(mean, std)
        self.conv_stem = nn.Conv2d(3, stem, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.act1 = nn.ReLU(inplace=True)
        channels, built = stem, []
        for stage in stages:
            blocks = []
            for spec in stage:
                block, channels = _block(channels, spec)
                blocks.append(block)
            built.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*built)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv_head = nn.Conv2d(channels, HEAD_FEATURES, 1, bias=False)
        self.norm_head = nn.BatchNorm2d(HEAD_FEATURES)
        self.act2 = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(HEAD_FEATURES, nc)
        self._initialize()

    def _initialize(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.act1(self.bn1(self.conv_stem(self.normalize(x))))
        x = self.pool(self.blocks(x))
        x = self.act2(self.norm_head(self.conv_head(x)))
        return self.classifier(self.dropout(torch.flatten(x, 1)))
