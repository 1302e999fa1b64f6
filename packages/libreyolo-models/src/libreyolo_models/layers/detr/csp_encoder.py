"""RT-DETR's (and RT-DETRv2's) hybrid encoder: attention within the coarsest level (AIFI), then CNN fusion across
levels (CCFM: a top-down then a bottom-up pass of CSP blocks built from RepVGG units).

Attention is spent only where it is cheap and pays most: on the stride-32 map (400 tokens at
640 px), whose features are the most semantic. The finer levels are fused by convolutions.
Module names are upstream's checkpoint keys (``input_proj``, ``encoder``, ``lateral_convs``,
``fpn_blocks``, ``downsample_convs``, ``pan_blocks``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..fuse import merge_parallel_convs
from .aifi import TransformerEncoder, attend_level
from .norms import NORM_EPS, ConvNorm

AIFI_LEVEL = 2          # the encoder attends within the stride-32 level only
CCFM_BLOCKS = 3         # RepVGG units per CSP block


class RepVggBlock(nn.Module):
    """``act(bn(3x3(x)) + bn(1x1(x)))``: two branches in training, one 3x3 after ``fuse()``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(channels, channels, 3, 1, padding=1)
        self.conv2: ConvNorm | None = ConvNorm(channels, channels, 1, 1, padding=0)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x) if self.conv2 is None else self.conv1(x) + self.conv2(x)
        return F.silu(y)

    def fuse_for_inference(self) -> bool:
        """Merge the (already folded) 1x1 branch into the 3x3 one."""
        if self.conv2 is None or not isinstance(self.conv2.norm, nn.Identity):
            return False
        merge_parallel_convs(self.conv1.conv, self.conv2.conv)
        self.conv2 = None
        return True


class CSPRepLayer(nn.Module):
    """Cross-stage-partial block: one 1x1 path through the RepVGG units, one straight 1x1 path,
    summed, then projected to ``c_out`` (no projection when the widths already agree)."""

    def __init__(self, c_in: int, c_out: int, blocks: int, expansion: float) -> None:
        super().__init__()
        hidden = int(c_out * expansion)
        self.conv1 = ConvNorm(c_in, hidden, 1, 1, act=nn.SiLU)
        self.conv2 = ConvNorm(c_in, hidden, 1, 1, act=nn.SiLU)
        self.bottlenecks = nn.Sequential(*(RepVggBlock(hidden) for _ in range(blocks)))
        self.conv3 = ConvNorm(hidden, c_out, 1, 1, act=nn.SiLU) if hidden != c_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(self.bottlenecks(self.conv1(x)) + self.conv2(x))


class HybridEncoder(nn.Module):
    """Backbone maps (strides 8, 16, 32) -> three fused maps of ``dim`` channels, same strides."""

    def __init__(self, in_channels: list[int], dim: int, heads: int, ffn: int, expansion: float) -> None:
        super().__init__()
        self.dim = dim
        levels = len(in_channels)
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, dim, 1, bias=False), nn.BatchNorm2d(dim, eps=NORM_EPS)) for c in in_channels)
        self.encoder = nn.ModuleList([TransformerEncoder(dim, heads, ffn)])
        self.lateral_convs = nn.ModuleList(ConvNorm(dim, dim, 1, 1, act=nn.SiLU) for _ in range(levels - 1))
        self.fpn_blocks = nn.ModuleList(CSPRepLayer(2 * dim, dim, CCFM_BLOCKS, expansion) for _ in range(levels - 1))
        self.downsample_convs = nn.ModuleList(ConvNorm(dim, dim, 3, 2, act=nn.SiLU) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(CSPRepLayer(2 * dim, dim, CCFM_BLOCKS, expansion) for _ in range(levels - 1))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        proj[AIFI_LEVEL] = attend_level(self.encoder[0], proj[AIFI_LEVEL])
        # Top-down: each coarser map, laterally projected, is upsampled and fused with the finer one.
        inner = [proj[-1]]
        for j, low in enumerate(reversed(proj[:-1])):
            high = self.lateral_convs[j](inner[0])
            inner[0] = high
            up = F.interpolate(high, scale_factor=2.0, mode="nearest")
            inner.insert(0, self.fpn_blocks[j](torch.cat((up, low), 1)))
        # Bottom-up: each finer result is downsampled and fused with the next lateral map.
        outs = [inner[0]]
        for j, high in enumerate(inner[1:]):
            outs.append(self.pan_blocks[j](torch.cat((self.downsample_convs[j](outs[-1]), high), 1)))
        return outs
