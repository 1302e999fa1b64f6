"""DAMO-YOLO's small building blocks: conv-BN-activation units, the Focus stem, SPP, the folded
RepVGG convolution and the mobile inverted-residual blocks of the nano sizes.

Attribute names are checkpoint keys of upstream LibreYOLO's DAMO-YOLO port (which follows
tinyvision/DAMO-YOLO): ``conv``/``bn`` in ``ConvBNAct``, ``conv1``/``bn1`` in ``ConvKXBN``,
``depthwise``/``dwnorm``/``pointwise``/``pwnorm``, numbered slots in the mobile blocks. Every
BatchNorm uses eps 1e-3 and momentum 0.03: upstream's builder sets them on every BatchNorm after
construction (they are not stored in checkpoints).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.conv import BN_EPS, BN_MOMENTUM, BatchNorm2d


def activation(name: str | None) -> nn.Module:
    """The activation module upstream names ``relu``, ``silu`` or ``identity`` (None: identity)."""
    if name in (None, "identity"):
        return nn.Identity()
    if name == "relu":
        return nn.ReLU(inplace=False)
    if name == "silu":
        return nn.SiLU(inplace=False)
    raise ValueError(f"unknown activation {name!r}; DAMO-YOLO uses 'relu', 'silu' or 'identity'")


def batchnorm(channels: int) -> BatchNorm2d:
    return BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class ConvBNAct(nn.Module):
    """``act(bn(conv(x)))`` with 'same' padding (``k // 2``) and a bias-free convolution."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, *, act: str | None = "silu",
                 groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False)
        self.bn = batchnorm(c_out)
        self.act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class ConvKXBN(nn.Module):
    """TinyNAS's conv-BN pair without an activation (keys ``conv1``, ``bn1``)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, bias=False)
        self.bn1 = batchnorm(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn1(self.conv1(x))


class ConvKXBNAct(nn.Module):
    """``ConvKXBN`` then an activation (upstream's ``ConvKXBNRELU``; the activation varies)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, act: str) -> None:
        super().__init__()
        self.conv = ConvKXBN(c_in, c_out, k, stride)
        self.activation_function = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        return self.activation_function(self.conv(x))


class Focus(nn.Module):
    """Space-to-depth stem: the four pixel phases stacked on channels, then a conv (stride 2 in all)."""

    def __init__(self, c_in: int, c_out: int, k: int, act: str) -> None:
        super().__init__()
        self.conv = ConvBNAct(4 * c_in, c_out, k, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        # Upstream's phase order: (even row, even col), (odd, even), (even, odd), (odd, odd).
        return self.conv(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))


class SPPBottleneck(nn.Module):
    """Halve channels, max-pool at 5/9/13 (stride 1), concatenate with the input, fuse.

    SiLU always: upstream builds it with its default activation even in ReLU backbones.
    """

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        hidden = c_in // 2
        self.conv1 = ConvBNAct(c_in, hidden, 1, act="silu")
        self.m = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.conv2 = ConvBNAct(4 * hidden, c_out, 1, act="silu")

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *(pool(x) for pool in self.m)], 1))


class RepConv(nn.Module):
    """DAMO-YOLO's RepVGG 3x3 convolution in its folded form: one 3x3 conv with a bias
    (``rbr_reparam``), then the activation.

    Upstream LibreYOLO folds every RepConv when it builds the model (its checkpoints and the
    layout manifests hold ``rbr_reparam``) and trains the folded convolution; so does this port.
    Files in the branch layout (``rbr_dense``/``rbr_1x1``, tinyvision's) are folded on load
    (``DamoYoloFamily.remap_state``, ``layers.repconv.fold_rep_branches``).
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1, *, act: str | None) -> None:
        super().__init__()
        self.nonlinearity = activation(act)
        self.rbr_reparam = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.nonlinearity(self.rbr_reparam(x))


class DepthwiseConv(nn.Module):
    """Depthwise conv-BN-act then pointwise conv-BN-act (the nano necks' downsampler)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, *, act: str) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(c_in, c_in, k, stride, (k - 1) // 2, groups=c_in, bias=False)
        self.dwnorm = batchnorm(c_in)
        self.pointwise = nn.Conv2d(c_in, c_out, 1, 1, 0, bias=False)
        self.pwnorm = batchnorm(c_out)
        self.act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.pwnorm(self.pointwise(self.act(self.dwnorm(self.depthwise(x))))))


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round to a multiple of ``divisor`` (at least ``divisor``), never more than 10 % below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class MobileBlock(nn.Module):
    """Inverted residual: 1x1 expand, 5x5 depthwise (stride 1 or 2), 1x1 project, each with a BN,
    residual when shape-preserving. ``squeeze_slot`` keeps upstream's slot 5 (an unused SE position,
    identity in every published size) so the numbered keys match: backbone blocks have it, neck
    blocks do not."""

    def __init__(self, c_in: int, c_out: int, expansion: float, stride: int = 1, *, act: str,
                 squeeze_slot: bool) -> None:
        super().__init__()
        hidden = make_divisible(int(math.ceil(c_out * expansion)))
        layers: list[nn.Module] = [
            nn.Conv2d(c_in, hidden, 1, bias=False), batchnorm(hidden), activation(act),
            nn.Conv2d(hidden, hidden, 5, stride, 2, groups=hidden, bias=False), batchnorm(hidden)]
        if squeeze_slot:
            layers.append(nn.Identity())
        layers += [activation(act), nn.Conv2d(hidden, c_out, 1, bias=False), batchnorm(c_out)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)
