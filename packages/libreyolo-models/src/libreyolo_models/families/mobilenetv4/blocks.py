"""MobileNetV4's building blocks: conv-BN(-ReLU), the fused inverted bottleneck, the universal one.

Attribute names are a file format: they follow the state-dict layout of timm's MobileNetV4
(``conv``/``bn1`` for a plain block; ``conv_exp``/``bn1``/``conv_pwl``/``bn2`` for the fused
bottleneck; ``dw_start``/``pw_exp``/``dw_mid``/``pw_proj``, each ``conv`` + ``bn``, for the
universal one), so weights published in that layout load unchanged. Paddings are symmetric
(``kernel // 2``).
"""

from __future__ import annotations

from torch import Tensor, nn


def make_divisible(value: float, divisor: int = 8) -> int:
    """``value`` to the nearest multiple of ``divisor``, never below 90 % of it."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvNorm(nn.Module):
    """``conv`` (no bias) then ``bn``, then ReLU when ``act``."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, *, groups: int = 1, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.ReLU(inplace=True) if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class ConvBlock(nn.Module):
    """A plain conv-BN-ReLU stage block (keys ``conv``, ``bn1``)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn1(self.conv(x)))


class FusedInvertedBottleneck(nn.Module):
    """Full conv expanding to ``cin * expand`` channels (BN, ReLU), then a 1x1 projection (BN);
    a residual when the shape is kept."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: float) -> None:
        super().__init__()
        mid = make_divisible(cin * expand)
        self.conv_exp = nn.Conv2d(cin, mid, kernel, stride, kernel // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.act = nn.ReLU(inplace=True)
        self.conv_pwl = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn2(self.conv_pwl(self.act(self.bn1(self.conv_exp(x)))))
        return out + x if self.residual else out


class UniversalInvertedBottleneck(nn.Module):
    """MobileNetV4's UIB: an optional depthwise conv before the expansion (``start``), the 1x1
    expansion, an optional depthwise conv after it (``mid``), the 1x1 projection. The four kinds
    of the paper are its settings: inverted bottleneck (mid only), ConvNeXt-like (start only),
    ExtraDW (both), FFN (neither). The stride sits on ``mid`` when there is one, else on ``start``."""

    def __init__(self, cin: int, cout: int, start: int, mid: int, stride: int, expand: float) -> None:
        super().__init__()
        hidden = make_divisible(cin * expand)
        self.dw_start: nn.Module = (ConvNorm(cin, cin, start, 1 if mid else stride, groups=cin, act=False)
                                    if start else nn.Identity())
        self.pw_exp = ConvNorm(cin, hidden, 1)
        self.dw_mid: nn.Module = ConvNorm(hidden, hidden, mid, stride, groups=hidden) if mid else nn.Identity()
        self.pw_proj = ConvNorm(hidden, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        out = self.pw_proj(self.dw_mid(self.pw_exp(self.dw_start(x))))
        return out + x if self.residual else out
