"""DAMO-YOLO's RepGFPN neck (upstream's ``GiraffeNeckV2``): a queen-fusion feature pyramid whose
nodes are CSP stages of re-parameterised 3x3 blocks (depthwise mobile blocks in the nano sizes).

Node names (``bu_conv13``, ``merge_3`` ... ``merge_7``) are upstream's checkpoint keys; the digits
name the pyramid nodes they connect.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import ConvBNAct, DepthwiseConv, MobileBlock, RepConv


class ReverseBlock(nn.Module):
    """``x + conv1(conv2(x))``: a RepVGG 3x3 to ``hidden`` channels, then a 3x3 conv back (upstream's
    ``BasicBlock_3x3_Reverse``); the nano necks use one mobile block (``conv``) instead."""

    def __init__(self, channels: int, hidden_ratio: float, *, act: str, depthwise: bool) -> None:
        super().__init__()
        self.depthwise = depthwise
        if depthwise:
            self.conv = MobileBlock(channels, channels, 3.0, 1, act=act, squeeze_slot=False)
        else:
            hidden = int(channels * hidden_ratio)
            self.conv1 = ConvBNAct(hidden, channels, 3, act=act)
            self.conv2 = RepConv(channels, hidden, act=act)

    def forward(self, x: Tensor) -> Tensor:
        if self.depthwise:
            return self.conv(x)
        return x + self.conv1(self.conv2(x))


class CSPStage(nn.Module):
    """Split by two 1x1 convs; one half through ``n`` chained blocks, every intermediate kept;
    concatenate the other half and all intermediates; fuse with a 1x1 conv."""

    def __init__(self, c_in: int, c_out: int, n: int, hidden_ratio: float, *, act: str, depthwise: bool) -> None:
        super().__init__()
        first = c_out // 2
        mid = c_out - first
        self.conv1 = ConvBNAct(c_in, first, 1, act=act)
        self.conv2 = ConvBNAct(c_in, mid, 1, act=act)
        self.convs = nn.Sequential(*(ReverseBlock(mid, hidden_ratio, act=act, depthwise=depthwise) for _ in range(n)))
        self.conv3 = ConvBNAct(mid * n + first, c_out, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        parts = [self.conv1(x)]
        y = self.conv2(x)
        for block in self.convs:
            y = block(y)
            parts.append(y)
        return self.conv3(torch.cat(parts, 1))


class GiraffeNeck(nn.Module):
    """RepGFPN over backbone levels (c3, c4, c5) -> outputs at strides 8, 16, 32.

    Args:
        c_in: backbone channels at strides 8, 16, 32; c_out: output channels at the same strides.
        depth: upstream's depth multiplier; each node has ``round(3 * depth)`` blocks (Python's
            rounding, half to even: 0.5 -> 2, 1.5 -> 4).
    """

    def __init__(self, c_in: tuple[int, int, int], c_out: tuple[int, int, int], depth: float,
                 hidden_ratio: float, *, act: str, depthwise: bool) -> None:
        super().__init__()
        n = round(3 * depth)

        def down(c: int) -> nn.Module:
            return DepthwiseConv(c, c, 3, 2, act=act) if depthwise else ConvBNAct(c, c, 3, 2, act=act)

        def node(ci: int, co: int) -> CSPStage:
            return CSPStage(ci, co, n, hidden_ratio, act=act, depthwise=depthwise)

        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.bu_conv13 = down(c_in[1])
        self.merge_3 = node(c_in[1] + c_in[2], c_in[2])
        self.bu_conv24 = down(c_in[0])
        self.merge_4 = node(c_in[0] + c_in[1] + c_in[2], c_in[1])
        self.merge_5 = node(c_in[1] + c_in[0], c_out[0])
        self.bu_conv57 = down(c_out[0])
        self.merge_7 = node(c_out[0] + c_in[1], c_out[1])
        self.bu_conv46 = down(c_in[1])
        self.bu_conv76 = down(c_out[1])
        self.merge_6 = node(c_in[1] + c_out[1] + c_in[2], c_out[2])

    def forward(self, feats: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        x2, x1, x0 = feats  # strides 8, 16, 32
        x3 = self.merge_3(torch.cat((x0, self.bu_conv13(x1)), 1))
        x4 = self.merge_4(torch.cat((x1, self.bu_conv24(x2), self.upsample(x3)), 1))
        x5 = self.merge_5(torch.cat((x2, self.upsample(x4)), 1))
        x7 = self.merge_7(torch.cat((x4, self.bu_conv57(x5)), 1))
        x6 = self.merge_6(torch.cat((x3, self.bu_conv46(x4), self.bu_conv76(x7)), 1))
        return x5, x7, x6
