"""YOLO-NAS building blocks: the ReLU conv units, the CSP layer with its bottlenecks, the backbone
stages, the neck's up and down stages, and SPP.

Attribute names (``conv1``..``conv3``, ``bottlenecks``, ``alpha``, ``downsample``, ``blocks``,
``reduce_skip1``/``2``, ``reduce_after_concat``, ``upsample``, ``cv1``/``cv2``, ``m``, ``seq``) are
checkpoint keys of YOLO-NAS weights (SuperGradients' and upstream LibreYOLO's): treat them as a file
format. Every BatchNorm uses eps 1e-3 and momentum 0.03 (what upstream sets after construction).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ...layers.conv import Conv
from ...layers.repvgg import QARepVGGBlock

BlockFactory = Callable[[int, int], nn.Module]
"""Builds a bottleneck's inner block from ``(c_in, c_out)``."""


class ConvReLU(Conv):
    """``relu(bn(conv(x)))`` with a bias-free convolution; keys ``conv``, ``bn``."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__(c_in, c_out, k, s)
        self.act = nn.ReLU()


class SeqConvReLU(nn.Module):
    """The head's conv unit: the same ``relu(bn(conv(x)))``, nested in ``seq`` (keys ``seq.conv``,
    ``seq.bn``), as SuperGradients' ``ConvBNReLU`` stores it; it folds like every ``Conv``."""

    def __init__(self, c_in: int, c_out: int, k: int = 1) -> None:
        super().__init__()
        self.seq = ConvReLU(c_in, c_out, k)

    def forward(self, x: Tensor) -> Tensor:
        return self.seq(x)


def repvgg_block(c_in: int, c_out: int) -> nn.Module:
    """A stride-1 QARepVGG block with its identity branch (the backbone's and up-stages' bottleneck unit)."""
    return QARepVGGBlock(c_in, c_out, residual=True)


def conv3x3_block(c_in: int, c_out: int) -> nn.Module:
    """A plain 3x3 ReLU conv unit (the down-stages' bottleneck unit)."""
    return ConvReLU(c_in, c_out, 3)


class Bottleneck(nn.Module):
    """Two blocks in a row, plus ``alpha`` times the input (a learnable residual scale)."""

    def __init__(self, channels: int, block: BlockFactory) -> None:
        super().__init__()
        self.cv1 = block(channels, channels)
        self.cv2 = block(channels, channels)
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.alpha * x + self.cv2(self.cv1(x))


class CSPLayer(nn.Module):
    """Cross-stage partial layer: ``conv1`` feeds a chain of bottlenecks, ``conv2`` bypasses it,
    ``conv3`` fuses the concatenation. With ``concat_intermediates`` (sizes m and l) every
    bottleneck's output joins the concatenation, not only the last one."""

    def __init__(self, c_in: int, c_out: int, n: int, block: BlockFactory, hidden: int,
                 concat_intermediates: bool = False) -> None:
        super().__init__()
        self.concat_intermediates = concat_intermediates
        self.conv1 = ConvReLU(c_in, hidden)
        self.conv2 = ConvReLU(c_in, hidden)
        self.conv3 = ConvReLU(hidden * (2 + (n if concat_intermediates else 0)), c_out)
        self.bottlenecks = nn.Sequential(*(Bottleneck(hidden, block) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x)
        parts = [y]
        for bottleneck in self.bottlenecks:
            y = bottleneck(y)
            parts.append(y)
        if not self.concat_intermediates:
            parts = [y]
        return self.conv3(torch.cat((*parts, self.conv2(x)), 1))


class Stage(nn.Module):
    """A backbone stage: a stride-2 QARepVGG block, then a CSP layer of QARepVGG bottlenecks."""

    def __init__(self, c_in: int, c_out: int, n: int, hidden: int, concat_intermediates: bool) -> None:
        super().__init__()
        self.downsample = QARepVGGBlock(c_in, c_out, 2, residual=False)
        self.blocks = CSPLayer(c_out, c_out, n, repvgg_block, hidden, concat_intermediates)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.downsample(x))


class UpStage(nn.Module):
    """A top-down neck stage over three inputs ``(x, skip1, skip2)``: ``x`` reduced and upsampled
    (a 2x2 transposed conv), ``skip1`` reduced, ``skip2`` (one level finer) reduced and strided
    down; the three concatenated, reduced and refined. Returns ``(reduced x, output)``: the
    reduced ``x`` feeds a later down stage."""

    def __init__(self, c_in: int, c_skip1: int, c_skip2: int, c_out: int, n: int, hidden: int) -> None:
        super().__init__()
        self.reduce_skip1 = ConvReLU(c_skip1, c_out)
        self.reduce_skip2 = ConvReLU(c_skip2, c_out)
        self.conv = ConvReLU(c_in, c_out)
        self.upsample = nn.ConvTranspose2d(c_out, c_out, 2, 2)
        self.downsample = ConvReLU(c_out, c_out, 3, 2)
        self.reduce_after_concat = ConvReLU(3 * c_out, c_out)
        self.blocks = CSPLayer(c_out, c_out, n, repvgg_block, hidden)

    def forward(self, x: Tensor, skip1: Tensor, skip2: Tensor) -> tuple[Tensor, Tensor]:
        inter = self.conv(x)
        merged = torch.cat((self.upsample(inter), self.reduce_skip1(skip1), self.downsample(self.reduce_skip2(skip2))), 1)
        return inter, self.blocks(self.reduce_after_concat(merged))


class DownStage(nn.Module):
    """A bottom-up neck stage: ``x`` strided down to half the output channels, concatenated with
    ``skip`` and refined by a CSP layer of plain 3x3 bottlenecks."""

    def __init__(self, c_in: int, c_skip: int, c_out: int, n: int, hidden: int) -> None:
        super().__init__()
        self.conv = ConvReLU(c_in, c_out // 2, 3, 2)
        self.blocks = CSPLayer(c_out // 2 + c_skip, c_out, n, conv3x3_block, hidden)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.blocks(torch.cat((self.conv(x), skip), 1))


class SPP(nn.Module):
    """Spatial pyramid pooling: halve the channels, max-pool at 5, 9 and 13 in parallel, fuse."""

    def __init__(self, c_in: int, c_out: int, kernels: tuple[int, ...] = (5, 9, 13)) -> None:
        super().__init__()
        hidden = c_in // 2
        self.cv1 = ConvReLU(c_in, hidden)
        self.cv2 = ConvReLU(hidden * (len(kernels) + 1), c_out)
        self.m = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in kernels)

    def forward(self, x: Tensor) -> Tensor:
        x = self.cv1(x)
        return self.cv2(torch.cat([x] + [pool(x) for pool in self.m], 1))
