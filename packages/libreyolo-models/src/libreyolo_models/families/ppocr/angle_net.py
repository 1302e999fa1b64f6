"""PP-OCR's text-line angle classifier (``ch_ppocr_mobile_v2.0_cls``): a MobileNetV3-small (x0.35)
with width-keeping strides, telling upright lines (class 0) from upside-down ones (class 1, 180 deg)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lcnet import hard_sigmoid, hard_swish

ANGLE_SIZE = (48, 192)   # the classifier's input: lines resized to height 48, padded to width 192


@dataclass(frozen=True)
class InvertedResidual:
    kernel: int
    expand: int
    out: int
    se: bool
    hard_swish: bool
    stride: tuple[int, int]


_H2, _S1 = (2, 1), (1, 1)
ANGLE_BLOCKS = (
    InvertedResidual(3, 8, 8, True, False, _H2),
    InvertedResidual(3, 24, 8, False, False, _H2),
    InvertedResidual(3, 32, 8, False, False, _S1),
    InvertedResidual(5, 32, 16, True, True, _H2),
    InvertedResidual(5, 88, 16, True, True, _S1),
    InvertedResidual(5, 88, 16, True, True, _S1),
    InvertedResidual(5, 40, 16, True, True, _S1),
    InvertedResidual(5, 48, 16, True, True, _S1),
    InvertedResidual(5, 104, 32, True, True, _H2),
    InvertedResidual(5, 200, 32, True, True, _S1),
    InvertedResidual(5, 200, 32, True, True, _S1),
)
STEM, LAST = 8, 200


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: tuple[int, int] = _S1, groups: int = 1,
                 act: str | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        x = self.bn(self.conv(x))
        if self.act == "relu":
            return F.relu(x)
        return hard_swish(x) if self.act == "hardswish" else x


class SqueezeExcite02(nn.Module):
    """Squeeze-excite with Paddle's hard-sigmoid (slope 0.2), no residual."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, channels // 4, 1)
        self.expand = nn.Conv2d(channels // 4, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        return x * hard_sigmoid(self.expand(F.relu(self.reduce(x.mean((2, 3), keepdim=True)))), 0.2)


class Block(nn.Module):
    def __init__(self, cin: int, spec: InvertedResidual) -> None:
        super().__init__()
        act = "hardswish" if spec.hard_swish else "relu"
        self.expand = ConvBN(cin, spec.expand, 1, act=act)
        self.dw = ConvBN(spec.expand, spec.expand, spec.kernel, spec.stride, groups=spec.expand, act=act)
        self.se = SqueezeExcite02(spec.expand) if spec.se else None
        self.project = ConvBN(spec.expand, spec.out, 1)
        self.residual = cin == spec.out and spec.stride == _S1

    def forward(self, x: Tensor) -> Tensor:
        y = self.dw(self.expand(x))
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


class AngleClassifier(nn.Module):
    """Normalised BGR ``[N, 3, 48, 192]`` -> ``[N, 2]`` probabilities (upright, upside down)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBN(3, STEM, 3, (2, 2), act="hardswish")
        blocks, cin = [], STEM
        for spec in ANGLE_BLOCKS:
            blocks.append(Block(cin, spec))
            cin = spec.out
        self.blocks = nn.Sequential(*blocks)
        self.last = ConvBN(cin, LAST, 1, act="hardswish")
        self.fc = nn.Linear(LAST, 2)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.last(self.blocks(self.stem(x))), 2, 2)
        return torch.softmax(self.fc(x.mean((2, 3))), dim=1)
