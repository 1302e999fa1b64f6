"""The CSPDarknet building blocks of YOLOX (Focus stem, depthwise conv, CSP layer, SPP).

Attribute names (``dconv``/``pconv``, ``conv1``..``conv3``, ``m``, ``conv``) are checkpoint keys of
upstream LibreYOLO (and the original YOLOX) weights: treat them as a file format.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import Conv


class DWConv(nn.Module):
    """Depthwise ``k x k`` conv then pointwise 1x1 conv, each with BN and SiLU (size n only)."""

    def __init__(self, c_in: int, c_out: int, k: int, s: int = 1) -> None:
        super().__init__()
        self.dconv = Conv(c_in, c_in, k, s, g=c_in)
        self.pconv = Conv(c_in, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pconv(self.dconv(x))


def spatial_conv(c_in: int, c_out: int, k: int, s: int, depthwise: bool) -> nn.Module:
    """A ``k x k`` conv: depthwise-separable for the nano size, a plain conv otherwise."""
    return DWConv(c_in, c_out, k, s) if depthwise else Conv(c_in, c_out, k, s)


class Focus(nn.Module):
    """Space-to-depth (each 2x2 patch's four pixels become channels), then a 3x3 conv.

    Channel order of the four phases is top-left, bottom-left, top-right, bottom-right: the order
    the first conv's weights were trained with.
    """

    def __init__(self, c_in: int, c_out: int, k: int = 3) -> None:
        super().__init__()
        self.conv = Conv(4 * c_in, c_out, k)

    def forward(self, x: Tensor) -> Tensor:
        phases = (x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2])
        return self.conv(torch.cat(phases, 1))


class Bottleneck(nn.Module):
    """1x1 conv then 3x3 conv, added to the input when ``shortcut`` (channels are kept)."""

    def __init__(self, c: int, shortcut: bool, depthwise: bool) -> None:
        super().__init__()
        self.conv1 = Conv(c, c, 1)
        self.conv2 = spatial_conv(c, c, 3, 1, depthwise)
        self.shortcut = shortcut

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv2(self.conv1(x))
        return x + y if self.shortcut else y


class CSPLayer(nn.Module):
    """Cross-stage partial layer: half the channels through ``n`` bottlenecks, half straight, fused."""

    def __init__(self, c_in: int, c_out: int, n: int, *, shortcut: bool = True, depthwise: bool = False) -> None:
        super().__init__()
        hidden = c_out // 2
        self.conv1 = Conv(c_in, hidden, 1)
        self.conv2 = Conv(c_in, hidden, 1)
        self.conv3 = Conv(2 * hidden, c_out, 1)
        self.m = nn.Sequential(*(Bottleneck(hidden, shortcut, depthwise) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(torch.cat((self.m(self.conv1(x)), self.conv2(x)), 1))


class SPPBottleneck(nn.Module):
    """Spatial pyramid pooling: max-pools of 5, 9 and 13 side by side, concatenated and fused."""

    def __init__(self, c_in: int, c_out: int, kernels: tuple[int, ...] = (5, 9, 13)) -> None:
        super().__init__()
        hidden = c_in // 2
        self.conv1 = Conv(c_in, hidden, 1)
        self.m = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in kernels)  # no weights
        self.conv2 = Conv(hidden * (len(kernels) + 1), c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *(pool(x) for pool in self.m)], 1))
