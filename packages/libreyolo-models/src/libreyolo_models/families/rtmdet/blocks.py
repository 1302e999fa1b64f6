"""CSPNeXt building blocks: the conv unit, the CSPNeXt bottleneck, the CSP layer with channel
attention, and the parallel-pool SPP block.

Attribute names (``main_conv``, ``short_conv``, ``final_conv``, ``blocks``, ``attention.fc``,
``depthwise_conv``, ``pointwise_conv``, ``conv1``, ``conv2``) are checkpoint keys of upstream
LibreYOLO's RTMDet (themselves mmdetection's): treat them as a file format.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import Conv

# RTMDet was trained with torch's BatchNorm defaults (mmdetection's config overrides the
# backbone's documented 1e-3 / 0.03). Not stored in checkpoints, so it must be rebuilt here;
# the published weights lose several mAP points at any other eps.
BN_EPS = 1e-5
BN_MOMENTUM = 0.1


class ConvModule(Conv):
    """``silu(bn(conv(x)))`` with RTMDet's BatchNorm settings (see ``BN_EPS``); keys ``conv``, ``bn``."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, g: int = 1) -> None:
        super().__init__(c_in, c_out, k, s, g=g)
        self.bn.eps, self.bn.momentum = BN_EPS, BN_MOMENTUM


class DepthwiseSeparable(nn.Module):
    """A ``k x k`` depthwise conv then a 1x1 pointwise conv, each with BatchNorm and SiLU."""

    def __init__(self, c_in: int, c_out: int, k: int) -> None:
        super().__init__()
        self.depthwise_conv = ConvModule(c_in, c_in, k, g=c_in)
        self.pointwise_conv = ConvModule(c_in, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise_conv(self.depthwise_conv(x))


class CSPNeXtBlock(nn.Module):
    """3x3 conv, then a 5x5 depthwise-separable conv; a residual when asked and shapes allow."""

    def __init__(self, channels: int, add_identity: bool, k: int = 5) -> None:
        super().__init__()
        self.conv1 = ConvModule(channels, channels, 3)
        self.conv2 = DepthwiseSeparable(channels, channels, k)
        self.add_identity = add_identity

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv2(self.conv1(x))
        return out + x if self.add_identity else out


class ChannelAttention(nn.Module):
    """Squeeze-and-excite with one 1x1 conv (with bias) and a hard sigmoid gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Conv2d(channels, channels, 1, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        gate = nn.functional.hardsigmoid(self.fc(nn.functional.adaptive_avg_pool2d(x, 1)))
        return x * gate


class CSPLayer(nn.Module):
    """Cross-stage-partial layer: a block stack on one half, a 1x1 shortcut on the other, joined
    (optionally gated by channel attention) by a 1x1 conv. Backbone stages use attention; the
    neck's layers do not."""

    def __init__(self, c_in: int, c_out: int, n: int, *, add_identity: bool, attention: bool) -> None:
        super().__init__()
        mid = c_out // 2
        self.main_conv = ConvModule(c_in, mid, 1)
        self.short_conv = ConvModule(c_in, mid, 1)
        self.final_conv = ConvModule(2 * mid, c_out, 1)
        self.blocks = nn.Sequential(*(CSPNeXtBlock(mid, add_identity) for _ in range(n)))
        self.attention = ChannelAttention(2 * mid) if attention else None

    def forward(self, x: Tensor) -> Tensor:
        joined = torch.cat((self.blocks(self.main_conv(x)), self.short_conv(x)), 1)
        if self.attention is not None:
            joined = self.attention(joined)
        return self.final_conv(joined)


class SPPBottleneck(nn.Module):
    """Spatial pyramid pooling with three *parallel* max-pools (5, 9, 13), as the published
    weights were trained (not the sequential SPPF variant, whose output differs)."""

    KERNELS = (5, 9, 13)

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        mid = c_in // 2
        self.conv1 = ConvModule(c_in, mid, 1)
        self.poolings = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in self.KERNELS)
        self.conv2 = ConvModule(mid * (len(self.KERNELS) + 1), c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *(pool(x) for pool in self.poolings)], 1))
