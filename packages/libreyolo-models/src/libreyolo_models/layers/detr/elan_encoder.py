"""D-FINE's hybrid encoder (also DEIM's, RT-DETRv4's and DEIMv2 n's): RT-DETR's design (attention
within the coarsest level, then a top-down and a bottom-up CNN fusion), with GELAN blocks
(``RepNCSPELAN4``: a split, two CSP branches chained, all concatenated) instead of CSP-RepVGG
blocks and a cheap separable downsampling (``SCDown``: 1x1 then a strided depthwise 3x3).

Module names are upstream's checkpoint keys (``input_proj``, ``encoder``, ``lateral_convs``,
``fpn_blocks.<i>.cv1..cv4``, ``downsample_convs.<i>.0.cv1/cv2``, ``pan_blocks``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .aifi import TransformerEncoder, attend_level
from .csp_encoder import CSPRepLayer
from .norms import NORM_EPS, ConvNorm


class SCDown(nn.Module):
    """1x1 projection then a strided depthwise ``k x k`` (no activations)."""

    def __init__(self, c_in: int, c_out: int, k: int, s: int) -> None:
        super().__init__()
        self.cv1 = ConvNorm(c_in, c_out, 1, 1)
        self.cv2 = ConvNorm(c_out, c_out, k, s, groups=c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv2(self.cv1(x))


class RepNCSPELAN4(nn.Module):
    """GELAN block: ``cv1`` to ``c3`` channels split in two halves; the second half runs through two
    chained (CSP-RepVGG + 3x3) branches; both halves and both branch outputs are concatenated
    and projected to ``c_out`` by ``cv4``. SiLU throughout."""

    def __init__(self, c_in: int, c_out: int, c3: int, c4: int, blocks: int) -> None:
        super().__init__()
        self.split = c3 // 2
        self.cv1 = ConvNorm(c_in, c3, 1, 1, act=nn.SiLU)
        self.cv2 = nn.Sequential(CSPRepLayer(c3 // 2, c4, blocks, 1.0), ConvNorm(c4, c4, 3, 1, act=nn.SiLU))
        self.cv3 = nn.Sequential(CSPRepLayer(c4, c4, blocks, 1.0), ConvNorm(c4, c4, 3, 1, act=nn.SiLU))
        self.cv4 = ConvNorm(c3 + 2 * c4, c_out, 1, 1, act=nn.SiLU)

    def forward(self, x: Tensor) -> Tensor:
        parts = list(self.cv1(x).split((self.split, self.split), 1))
        parts.append(self.cv2(parts[-1]))
        parts.append(self.cv3(parts[-1]))
        return self.cv4(torch.cat(parts, 1))


class ELANHybridEncoder(nn.Module):
    """Backbone maps -> as many fused maps of ``dim`` channels, same strides.

    Args:
        in_channels: width of each backbone map (finest first).
        dim, heads, ffn: width, attention heads and feed-forward width of the attention layer.
        expansion, depth_mult: GELAN widths (``round(expansion * dim // 2)``) and CSP depths
            (``round(3 * depth_mult)``), as upstream's size table gives them.
        attend: index of the map the attention layer runs on (the coarsest).
    """

    def __init__(self, in_channels: list[int], dim: int, *, ffn: int, expansion: float, depth_mult: float,
                 attend: int, heads: int = 8) -> None:
        super().__init__()
        self.dim, self.attend = dim, attend
        levels = len(in_channels)
        self.input_proj = nn.ModuleList(nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(c, dim, 1, bias=False)), ("norm", nn.BatchNorm2d(dim, eps=NORM_EPS))]))
            for c in in_channels)
        self.encoder = nn.ModuleList([TransformerEncoder(dim, heads, ffn)])
        c4, blocks = round(expansion * dim // 2), round(3 * depth_mult)
        self.lateral_convs = nn.ModuleList(ConvNorm(dim, dim, 1, 1) for _ in range(levels - 1))
        self.fpn_blocks = nn.ModuleList(RepNCSPELAN4(2 * dim, dim, 2 * dim, c4, blocks) for _ in range(levels - 1))
        self.downsample_convs = nn.ModuleList(nn.Sequential(SCDown(dim, dim, 3, 2)) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(RepNCSPELAN4(2 * dim, dim, 2 * dim, c4, blocks) for _ in range(levels - 1))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        proj[self.attend] = attend_level(self.encoder[0], proj[self.attend])
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
