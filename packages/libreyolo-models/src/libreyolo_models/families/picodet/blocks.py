"""PicoDet building blocks: the conv unit, depthwise-separable convs, the ESNet blocks (Enhanced
ShuffleNet, with squeeze-excitation) and the CSP layer of the CSP-PAN neck.

Attribute names (``conv``/``bn``, ``depthwise_conv``/``pointwise_conv``, ``conv_pw``, ``conv_dw``,
``conv_linear``, ``conv_dw_1``, ``conv_linear_1``, ``conv_pw_2``, ``conv_dw_2``, ``conv_linear_2``,
``conv_dw_mv1``, ``conv_pw_mv1``, ``se.conv1``/``conv2``, ``main_conv``, ``short_conv``,
``final_conv``, ``blocks``) are checkpoint keys of upstream LibreYOLO's PicoDet (Bo396543018's
PyTorch port of PaddleDetection's, with mmcv's wrappers flattened): treat them as a file format.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.conv import Conv

# PicoDet trains with torch's BatchNorm defaults (not stored in checkpoints, so rebuilt here).
BN_EPS = 1e-5
BN_MOMENTUM = 0.1


class HardSigmoid(nn.Module):
    """mmcv's hard sigmoid as PicoDet configures it: ``clamp((x + 3) / 6, 0, 6)``.

    Not torch's ``hardsigmoid`` (which stops at 1): the excitation gates may reach 6, and the
    published weights were trained with that headroom.
    """

    def forward(self, x: Tensor) -> Tensor:
        return ((x + 3.0) / 6.0).clamp(0.0, 6.0)


class ConvBNAct(Conv):
    """``act(bn(conv(x)))`` with a bias-free conv and PicoDet's BatchNorm settings; ``act=False``
    leaves the activation out (the linear depthwise convs), else hard-swish. Keys ``conv``, ``bn``."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True) -> None:
        super().__init__(c_in, c_out, k, s, g=g, act=act)
        self.bn.eps, self.bn.momentum = BN_EPS, BN_MOMENTUM
        if act:
            self.act = nn.Hardswish()


class DepthwiseSeparable(nn.Module):
    """A ``k x k`` depthwise conv then a 1x1 pointwise conv, each with BatchNorm and hard-swish."""

    def __init__(self, c_in: int, c_out: int, k: int = 5, s: int = 1) -> None:
        super().__init__()
        self.depthwise_conv = ConvBNAct(c_in, c_in, k, s, g=c_in)
        self.pointwise_conv = ConvBNAct(c_in, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise_conv(self.depthwise_conv(x))


class SELayer(nn.Module):
    """Squeeze-excitation: global average, a ReLU bottleneck (a quarter of the channels), a hard
    sigmoid gate that scales each channel."""

    def __init__(self, channels: int, ratio: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels // ratio, 1)
        self.conv2 = nn.Conv2d(channels // ratio, channels, 1)
        self.gate = HardSigmoid()

    def forward(self, x: Tensor) -> Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.conv2(F.relu(self.conv1(scale))))


def channel_shuffle(x: Tensor, groups: int = 2) -> Tensor:
    """Interleave the channels of ``groups`` equal groups (ShuffleNet).

    The sizes come from ``x.shape`` (a trace records them as the input's sizes). Not ``unflatten``:
    its ONNX export left every later shape of the graph fixed at the traced batch (a batch of 8 then
    failed in a reshape of the head).
    """
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ESBlock(nn.Module):
    """Stride-1 ES block: half the channels pass; the other half goes 1x1, 3x3 depthwise (linear),
    both concatenated, excited, projected; the halves are concatenated and shuffled."""

    def __init__(self, c_in: int, c_mid: int, c_out: int) -> None:
        super().__init__()
        self.conv_pw = ConvBNAct(c_in // 2, c_mid // 2, 1)
        self.conv_dw = ConvBNAct(c_mid // 2, c_mid // 2, 3, g=c_mid // 2, act=False)
        self.se = SELayer(c_mid)
        self.conv_linear = ConvBNAct(c_mid, c_out // 2, 1)

    def forward(self, x: Tensor) -> Tensor:
        passed, x = x.chunk(2, 1)
        x = self.conv_pw(x)
        x = self.conv_linear(self.se(torch.cat((x, self.conv_dw(x)), 1)))
        return channel_shuffle(torch.cat((passed, x), 1))


class ESBlockDS(nn.Module):
    """Stride-2 ES block: a depthwise branch and an excited 1x1-depthwise branch, concatenated,
    then a depthwise 3x3 and a pointwise conv over the result."""

    def __init__(self, c_in: int, c_mid: int, c_out: int) -> None:
        super().__init__()
        self.conv_dw_1 = ConvBNAct(c_in, c_in, 3, 2, g=c_in, act=False)
        self.conv_linear_1 = ConvBNAct(c_in, c_out // 2, 1)
        self.conv_pw_2 = ConvBNAct(c_in, c_mid // 2, 1)
        self.conv_dw_2 = ConvBNAct(c_mid // 2, c_mid // 2, 3, 2, g=c_mid // 2, act=False)
        self.se = SELayer(c_mid // 2)
        self.conv_linear_2 = ConvBNAct(c_mid // 2, c_out // 2, 1)
        self.conv_dw_mv1 = ConvBNAct(c_out, c_out, 3, g=c_out)
        self.conv_pw_mv1 = ConvBNAct(c_out, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        left = self.conv_linear_1(self.conv_dw_1(x))
        right = self.conv_linear_2(self.se(self.conv_dw_2(self.conv_pw_2(x))))
        return self.conv_pw_mv1(self.conv_dw_mv1(torch.cat((left, right), 1)))


class DarknetBottleneck(nn.Module):
    """A 1x1 conv then a 5x5 depthwise-separable conv (no residual in PicoDet's neck)."""

    def __init__(self, channels: int, k: int = 5) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(channels, channels, 1)
        self.conv2 = DepthwiseSeparable(channels, channels, k)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.conv1(x))


class CSPLayer(nn.Module):
    """Cross-stage partial layer: half the output width through ``n`` bottlenecks (``main_conv``),
    half straight (``short_conv``), concatenated and fused by ``final_conv``."""

    def __init__(self, c_in: int, c_out: int, n: int = 1, k: int = 5) -> None:
        super().__init__()
        mid = c_out // 2
        self.main_conv = ConvBNAct(c_in, mid, 1)
        self.short_conv = ConvBNAct(c_in, mid, 1)
        self.final_conv = ConvBNAct(2 * mid, c_out, 1)
        self.blocks = nn.Sequential(*(DarknetBottleneck(mid, k) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        return self.final_conv(torch.cat((self.blocks(self.main_conv(x)), self.short_conv(x)), 1))
