"""RF-DETR's projector: the four ViT maps, concatenated, fused by a C2f block into the decoder's
256-wide memory (one level, at the patch stride).

Convolutions here are normalised by a LayerNorm over channels (not BatchNorm: the statistics of a
ViT's tokens do not suit batch statistics, and small detection batches would make them noisy).
Module names (``stages.0.0.cv1.conv`` / ``.bn`` ...) are upstream's checkpoint keys: the norm sits
where a BatchNorm would, under the name ``bn``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LN_EPS = 1e-6  # the projector's channel norms (upstream's ConvNeXt-style LayerNorm default)


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of ``[B, C, H, W]`` maps (normalised channels-last, where fp16
    does not overflow the way a channels-first mean/variance can)."""

    def __init__(self, channels: int, eps: float = LN_EPS) -> None:
        super().__init__(channels, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNorm(nn.Module):
    """Convolution (no bias), channel LayerNorm, SiLU."""

    def __init__(self, c_in: int, c_out: int, k: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, 1, k // 2, bias=False)
        self.bn = ChannelLayerNorm(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.bn(self.conv(x.contiguous())))


class Bottleneck(nn.Module):
    """Two 3x3 ConvNorms (no residual: the C2f here is built without shortcuts)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.cv1 = ConvNorm(channels, channels, 3)
        self.cv2 = ConvNorm(channels, channels, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv2(self.cv1(x))


class C2f(nn.Module):
    """Split, a chain of bottlenecks on the second half, concatenate every intermediate, fuse."""

    def __init__(self, c_in: int, c_out: int, blocks: int = 3) -> None:
        super().__init__()
        self.hidden = c_out // 2
        self.cv1 = ConvNorm(c_in, 2 * self.hidden)
        self.cv2 = ConvNorm((2 + blocks) * self.hidden, c_out)
        self.m = nn.ModuleList(Bottleneck(self.hidden) for _ in range(blocks))

    def forward(self, x: Tensor) -> Tensor:
        parts = list(self.cv1(x).split((self.hidden, self.hidden), 1))
        for block in self.m:
            parts.append(block(parts[-1]))
        return self.cv2(torch.cat(parts, 1))


class Projector(nn.Module):
    """``[B, C_vit, h, w]`` x 4 -> ``[B, out, h, w]``: concatenated, C2f, channel LayerNorm."""

    def __init__(self, c_in: int, levels: int, c_out: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList([nn.Sequential(C2f(c_in * levels, c_out), ChannelLayerNorm(c_out))])

    def forward(self, maps: list[Tensor]) -> Tensor:
        return self.stages[0](torch.cat(maps, 1))
