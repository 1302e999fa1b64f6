"""ResNet-vd (upstream's ``PResNet``), the backbone of RT-DETR r18/r34/r50/r50m/r101.

The "vd" tweaks over a plain ResNet: a stem of three 3x3 convolutions instead of one 7x7, and
downsampling shortcuts that average-pool before their 1x1 convolution (no information is
skipped by a strided 1x1). It returns stages 2-4 (strides 8, 16, 32). Module names are upstream's
checkpoint keys (``conv1.conv1_1``, ``res_layers.<i>.blocks.<j>.branch2a``, ``short``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch.nn.functional as F
from torch import Tensor, nn

from .norms import ConvNorm

_BLOCKS_PER_STAGE = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
_STAGE_WIDTHS = (64, 128, 256, 512)
_RETURNED = (1, 2, 3)  # stages whose outputs the encoder reads (strides 8, 16, 32)


def _shortcut(c_in: int, c_out: int, stride: int, frozen: bool) -> nn.Module:
    """vd shortcut: average-pool then 1x1 when downsampling, else a plain 1x1 projection."""
    if stride == 2:
        return nn.Sequential(OrderedDict([("pool", nn.AvgPool2d(2, 2, 0, ceil_mode=True)),
                                          ("conv", ConvNorm(c_in, c_out, 1, 1, frozen=frozen))]))
    return ConvNorm(c_in, c_out, 1, stride, frozen=frozen)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions plus a shortcut (r18, r34)."""

    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int, projected: bool, frozen: bool) -> None:
        super().__init__()
        # Registration order is upstream's state-dict order: ``short`` first in this block.
        self.short = _shortcut(c_in, width, stride, frozen) if projected else None
        self.branch2a = ConvNorm(c_in, width, 3, stride, act=nn.ReLU, frozen=frozen)
        self.branch2b = ConvNorm(width, width, 3, 1, frozen=frozen)

    def forward(self, x: Tensor) -> Tensor:
        short = self.short(x) if self.short is not None else x
        return F.relu(self.branch2b(self.branch2a(x)) + short)


class BottleNeck(nn.Module):
    """1x1 reduce, 3x3 (strided, vd), 1x1 expand x4, plus a shortcut (r50, r101)."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int, projected: bool, frozen: bool) -> None:
        super().__init__()
        self.branch2a = ConvNorm(c_in, width, 1, 1, act=nn.ReLU, frozen=frozen)
        self.branch2b = ConvNorm(width, width, 3, stride, act=nn.ReLU, frozen=frozen)
        self.branch2c = ConvNorm(width, width * self.expansion, 1, 1, frozen=frozen)
        # After the branches here: upstream's order.
        self.short = _shortcut(c_in, width * self.expansion, stride, frozen) if projected else None

    def forward(self, x: Tensor) -> Tensor:
        short = self.short(x) if self.short is not None else x
        return F.relu(self.branch2c(self.branch2b(self.branch2a(x))) + short)


class ResStage(nn.Module):
    """One stage: its first block changes width (and stride), the rest keep it."""

    def __init__(self, block: type[BasicBlock] | type[BottleNeck], c_in: int, width: int, count: int,
                 stride: int, frozen: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList()
        for i in range(count):
            self.blocks.append(block(c_in, width, stride if i == 0 else 1, i == 0, frozen))
            c_in = width * block.expansion

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class ResNetVd(nn.Module):
    """ResNet-vd of ``depth`` 18, 34, 50 or 101 -> feature maps at strides 8, 16, 32."""

    def __init__(self, depth: int, frozen_norm: bool) -> None:
        super().__init__()
        if depth not in _BLOCKS_PER_STAGE:
            raise ValueError(f"ResNet depth {depth} is not one of {sorted(_BLOCKS_PER_STAGE)}")
        f = frozen_norm
        self.conv1 = nn.Sequential(OrderedDict([
            ("conv1_1", ConvNorm(3, 32, 3, 2, act=nn.ReLU, frozen=f)),
            ("conv1_2", ConvNorm(32, 32, 3, 1, act=nn.ReLU, frozen=f)),
            ("conv1_3", ConvNorm(32, 64, 3, 1, act=nn.ReLU, frozen=f)),
        ]))
        block = BottleNeck if depth >= 50 else BasicBlock
        self.res_layers = nn.ModuleList()
        c_in = 64
        for i, (count, width) in enumerate(zip(_BLOCKS_PER_STAGE[depth], _STAGE_WIDTHS)):
            self.res_layers.append(ResStage(block, c_in, width, count, 1 if i == 0 else 2, f))
            c_in = width * block.expansion
        self.out_channels = [_STAGE_WIDTHS[i] * block.expansion for i in _RETURNED]

    def forward(self, x: Tensor) -> list[Tensor]:
        x = F.max_pool2d(self.conv1(x), kernel_size=3, stride=2, padding=1)
        outs = []
        for i, stage in enumerate(self.res_layers):
            x = stage(x)
            if i in _RETURNED:
                outs.append(x)
        return outs
