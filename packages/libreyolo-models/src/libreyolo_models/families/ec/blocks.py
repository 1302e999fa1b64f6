"""EC's convolution blocks (D-FINE's): conv + BatchNorm (+ activation), the RepVGG-style block,
the CSP and ELAN fusions of the encoder (its transformer layer is the kit's AIFI, with SiLU).

Module names are upstream's checkpoint keys (``conv``, ``norm``, ``cv1`` ... ``bottlenecks``).
BatchNorm eps 1e-5, momentum 0.1 (torch's defaults, upstream's values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def activation(name: str | None) -> nn.Module:
    """``relu`` / ``silu`` / ``gelu`` as a module (``None``: identity)."""
    table: dict[str | None, type[nn.Module]] = {None: nn.Identity, "relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU}
    if name not in table:
        raise ValueError(f"unknown activation {name!r}; known: relu, silu, gelu")
    return table[name]()


class ConvNorm(nn.Module):
    """Convolution (no bias) + BatchNorm + optional activation; padding keeps the size at stride 1."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, groups: int = 1, padding: int | None = None,
                 act: str | None = None) -> None:
        super().__init__()
        pad = (k - 1) // 2 if padding is None else padding
        self.conv = nn.Conv2d(c_in, c_out, k, stride, padding=pad, groups=groups, bias=False)
        self.norm = nn.BatchNorm2d(c_out)
        self.act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class VGGBlock(nn.Module):
    """RepVGG-style: a 3x3 and a 1x1 conv-norm branch, summed, then SiLU."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(c_in, c_out, 3, 1, padding=1)
        self.conv2 = ConvNorm(c_in, c_out, 1, 1, padding=0)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.conv1(x) + self.conv2(x))


class SCDown(nn.Module):
    """Downsampling: a 1x1 conv-norm, then a depthwise 3x3 stride-2 conv-norm (no activations)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.cv1 = ConvNorm(c_in, c_out, 1, 1)
        self.cv2 = ConvNorm(c_out, c_out, 3, 2, groups=c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv2(self.cv1(x))


class CSPLayer2(nn.Module):
    """One 1x1 conv split in halves; the second half through VGG blocks; the halves added."""

    def __init__(self, c_in: int, c_out: int, blocks: int) -> None:
        super().__init__()
        self.hidden = c_out
        self.conv1 = ConvNorm(c_in, 2 * c_out, 1, 1, act="silu")
        self.bottlenecks = nn.Sequential(*(VGGBlock(c_out, c_out) for _ in range(blocks)))

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.conv1(x).chunk(2, 1)
        return a + self.bottlenecks(b)


class RepNCSPELAN4(nn.Module):
    """ELAN fusion: split, two CSP stages in a chain, concatenate everything, fuse."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int, blocks: int) -> None:
        super().__init__()
        self.split_at = c3 // 2
        self.cv1 = ConvNorm(c1, c3, 1, 1, act="silu")
        self.cv2 = nn.Sequential(CSPLayer2(c3 // 2, c4, blocks))
        self.cv3 = nn.Sequential(CSPLayer2(c4, c4, blocks))
        self.cv4 = ConvNorm(c3 + 2 * c4, c2, 1, 1, act="silu")

    def forward(self, x: Tensor) -> Tensor:
        parts = list(self.cv1(x).split((self.split_at, self.split_at), 1))
        parts.append(self.cv2(parts[-1]))
        parts.append(self.cv3(parts[-1]))
        return self.cv4(torch.cat(parts, 1))
