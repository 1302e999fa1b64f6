"""PP-LCNetV3, the backbone of both PP-OCRv4 mobile networks, in its deployed (re-parameterised) form.

The published inference models carry each learnable re-parameterised layer already folded into one
convolution with a bias, followed by a learnable scalar affine (``x * scale + bias``) and, unless the
layer halves both sides, a hard-swish with its own scalar affine. We keep that folded layout: it is
what the weights are, so nothing is re-derived and the numbers match the ONNX graph op for op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Stride = tuple[int, int]


@dataclass(frozen=True)
class BlockSpec:
    """One depthwise-separable block: depthwise ``kernel`` at ``stride``, then 1x1 ``cin -> cout``."""

    kernel: int
    cin: int
    cout: int
    stride: Stride
    se: bool = False


def hard_swish(x: Tensor) -> Tensor:
    """``x * clip(x + 3, 0, 6) / 6``, written out in the exported graph's order of operations."""
    return x * (x + 3.0).clamp(0.0, 6.0) / 6.0


def hard_sigmoid(x: Tensor, slope: float) -> Tensor:
    """``clip(slope * x + 0.5, 0, 1)``: the backbone's SE uses 1/6, the detector's neck Paddle's 0.2."""
    return (x * slope + 0.5).clamp(0.0, 1.0)


class ScalarAffine(nn.Module):
    """``x * scale + bias`` with one learned scalar each (PP-LCNetV3's learnable affine block)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x + self.bias


class HardSwishAffine(nn.Module):
    """Hard-swish followed by its own scalar affine (the block's activation)."""

    def __init__(self) -> None:
        super().__init__()
        self.affine = ScalarAffine()

    def forward(self, x: Tensor) -> Tensor:
        return self.affine(hard_swish(x))


class FoldedRepConv(nn.Module):
    """A re-parameterised layer after folding: conv (+bias) -> scalar affine -> [hard-swish affine].

    Upstream skips the activation only when the stride is exactly 2 on both sides; a ``(2, 1)``
    stride (the recogniser keeps width) still activates.
    """

    def __init__(self, cin: int, cout: int, kernel: int, stride: Stride, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=True)
        self.affine = ScalarAffine()
        self.act = HardSwishAffine() if stride != (2, 2) else None

    def forward(self, x: Tensor) -> Tensor:
        x = self.affine(self.conv(x))
        return self.act(x) if self.act is not None else x


class SqueezeExcite(nn.Module):
    """Channel attention: global mean -> 1x1 (c/4) -> ReLU -> 1x1 (c) -> hard-sigmoid(1/6), scaling ``x``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, channels // 4, 1)
        self.expand = nn.Conv2d(channels // 4, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        s = self.expand(F.relu(self.reduce(x.mean((2, 3), keepdim=True))))
        return x * hard_sigmoid(s, 1.0 / 6.0)


class LCNetBlock(nn.Module):
    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        self.dw = FoldedRepConv(spec.cin, spec.cin, spec.kernel, spec.stride, groups=spec.cin)
        self.se = SqueezeExcite(spec.cin) if spec.se else None
        self.pw = FoldedRepConv(spec.cin, spec.cout, 1, (1, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = self.dw(x)
        if self.se is not None:
            x = self.se(x)
        return self.pw(x)


class LCNetV3(nn.Module):
    """Stem (3x3 stride-2 conv + BatchNorm, no activation) and five stages of blocks; returns every
    stage's output after the first (the detector reads the last four, the recogniser the last)."""

    def __init__(self, stem: int, stages: Sequence[Sequence[BlockSpec]]) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, stem, 3, 2, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(stem)
        self.stages = nn.ModuleList(nn.Sequential(*(LCNetBlock(b) for b in stage)) for stage in stages)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem_bn(self.stem(x))
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs[1:]

