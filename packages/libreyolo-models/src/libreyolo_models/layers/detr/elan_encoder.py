"""D-FINE's hybrid encoder (also DEIM's, RT-DETRv4's and DEIMv2 n's): RT-DETR's design (attention
within the coarsest level, then a top-down and a bottom-up CNN fusion), with GELAN blocks
(``RepNCSPELAN4``: a split, two CSP branches chained, all concatenated) instead of CSP-RepVGG
blocks and a cheap separable downsampling (``SCDown``: 1x1 then a strided depthwise 3x3).

Module names are upstream's checkpoint keys (``input_proj``, ``encoder``, ``lateral_convs``,
``fpn_blocks.<i>.cv1..cv4``, ``downsample_convs.<i>.0.cv1/cv2``, ``pan_blocks``).

DEIMv2 varies the blocks: its CSP branches split one 1x1 convolution in two (``CSPLayer2``,
YOLO's RepC3), its s-x sizes drop the 3x3 after each branch (``RepNCSPELAN5``), it adds the two
maps it fuses instead of concatenating them, and it skips input projections that would keep the
width. Its smallest sizes use :class:`LiteEncoder` (one backbone map, no attention).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .aifi import TransformerEncoder, attend_level
from .csp_encoder import CSPRepLayer, RepVggBlock
from .norms import NORM_EPS, ConvNorm

Block = Literal["elan4", "elan4-csp2", "elan5-csp2"]


class SCDown(nn.Module):
    """1x1 projection then a strided depthwise ``k x k`` (no activations)."""

    def __init__(self, c_in: int, c_out: int, k: int, s: int) -> None:
        super().__init__()
        self.cv1 = ConvNorm(c_in, c_out, 1, 1)
        self.cv2 = ConvNorm(c_out, c_out, k, s, groups=c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv2(self.cv1(x))


class CSPLayer2(nn.Module):
    """CSP block with one 1x1 convolution split in two halves: ``conv3(a + RepVGG(b))``
    (``conv3`` only when the width changes)."""

    def __init__(self, c_in: int, c_out: int, blocks: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(c_in, 2 * c_out, 1, 1, act=nn.SiLU)
        self.bottlenecks = nn.Sequential(*(RepVggBlock(c_out) for _ in range(blocks)))
        self.conv3 = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.conv1(x).chunk(2, 1)
        return self.conv3(a + self.bottlenecks(b))


class RepNCSPELAN4(nn.Module):
    """GELAN block: ``cv1`` to ``c3`` channels split in two halves; the second half runs through two
    chained branches (a CSP block, then a 3x3 unless ``block`` is ``elan5-csp2``); both halves and
    both branch outputs are concatenated and projected to ``c_out`` by ``cv4``. SiLU throughout."""

    def __init__(self, c_in: int, c_out: int, c3: int, c4: int, blocks: int, block: Block = "elan4") -> None:
        super().__init__()
        self.split = c3 // 2

        def branch(width: int) -> nn.Sequential:
            csp: nn.Module = CSPRepLayer(width, c4, blocks, 1.0) if block == "elan4" else CSPLayer2(width, c4, blocks)
            if block == "elan5-csp2":
                return nn.Sequential(csp)
            return nn.Sequential(csp, ConvNorm(c4, c4, 3, 1, act=nn.SiLU))

        self.cv1 = ConvNorm(c_in, c3, 1, 1, act=nn.SiLU)
        self.cv2 = branch(c3 // 2)
        self.cv3 = branch(c4)
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
        block, fuse: the GELAN variant, and whether two maps are concatenated (D-FINE) or added
            (DEIMv2).
    """

    def __init__(self, in_channels: list[int], dim: int, *, ffn: int, expansion: float, depth_mult: float,
                 attend: int, heads: int = 8, block: Block = "elan4", fuse: Literal["cat", "sum"] = "cat") -> None:
        super().__init__()
        self.dim, self.attend, self.fuse = dim, attend, fuse
        levels = len(in_channels)
        # DEIMv2 (``fuse="sum"``) skips a projection that would keep the width; D-FINE always projects.
        self.input_proj = nn.ModuleList(
            nn.Identity() if c == dim and fuse == "sum" else nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(c, dim, 1, bias=False)), ("norm", nn.BatchNorm2d(dim, eps=NORM_EPS))]))
            for c in in_channels)
        self.encoder = nn.ModuleList([TransformerEncoder(dim, heads, ffn)])
        c1, c4, blocks = (dim if fuse == "sum" else 2 * dim), round(expansion * dim // 2), round(3 * depth_mult)
        self.lateral_convs = nn.ModuleList(ConvNorm(dim, dim, 1, 1) for _ in range(levels - 1))
        self.fpn_blocks = nn.ModuleList(RepNCSPELAN4(c1, dim, 2 * dim, c4, blocks, block) for _ in range(levels - 1))
        self.downsample_convs = nn.ModuleList(nn.Sequential(SCDown(dim, dim, 3, 2)) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(RepNCSPELAN4(c1, dim, 2 * dim, c4, blocks, block) for _ in range(levels - 1))

    def _fuse(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b if self.fuse == "sum" else torch.cat((a, b), 1)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        proj[self.attend] = attend_level(self.encoder[0], proj[self.attend])
        # Top-down: each coarser map, laterally projected, is upsampled and fused with the finer one.
        inner = [proj[-1]]
        for j, low in enumerate(reversed(proj[:-1])):
            high = self.lateral_convs[j](inner[0])
            inner[0] = high
            up = F.interpolate(high, scale_factor=2.0, mode="nearest")
            inner.insert(0, self.fpn_blocks[j](self._fuse(up, low)))
        # Bottom-up: each finer result is downsampled and fused with the next lateral map.
        outs = [inner[0]]
        for j, high in enumerate(inner[1:]):
            outs.append(self.pan_blocks[j](self._fuse(self.downsample_convs[j](outs[-1]), high)))
        return outs


class GAPFusion(nn.Module):
    """Add the map's global average to every position, then a 1x1 (``cv``) with SiLU."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.cv = ConvNorm(dim, dim, 1, 1, act=nn.SiLU)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv(x + F.adaptive_avg_pool2d(x, 1))


def _pool_down(dim: int) -> nn.Sequential:
    """Stride-2 3x3 average pool, 1x1, BatchNorm, SiLU (keys ``1`` and ``2``, as upstream's)."""
    return nn.Sequential(nn.AvgPool2d(3, 2, 1), nn.Conv2d(dim, dim, 1, bias=False), nn.BatchNorm2d(dim, eps=NORM_EPS),
                         nn.SiLU())


class LiteEncoder(nn.Module):
    """DEIMv2 atto/femto/pico's encoder: one backbone map (stride 16) -> two maps (16, 32) of
    ``dim`` channels. The coarse map is pooled from the fine one and given global context; one
    top-down and one bottom-up GELAN block fuse them (no attention)."""

    def __init__(self, in_channels: list[int], dim: int, *, expansion: float, depth_mult: float) -> None:
        super().__init__()
        self.input_proj = nn.ModuleList(nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(c, dim, 1, bias=False)), ("norm", nn.BatchNorm2d(dim, eps=NORM_EPS))]))
            for c in in_channels)
        self.down_sample1 = _pool_down(dim)
        self.down_sample2 = _pool_down(dim)
        self.bi_fusion = GAPFusion(dim)
        c4, blocks = round(expansion * dim // 2), round(3 * depth_mult)
        self.fpn_block = RepNCSPELAN4(dim, dim, 2 * dim, c4, blocks, "elan4-csp2")
        self.pan_block = RepNCSPELAN4(dim, dim, 2 * dim, c4, blocks, "elan4-csp2")

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        fine = self.input_proj[0](feats[0])
        coarse = self.bi_fusion(self.down_sample1(fine))
        fine_out = self.fpn_block(fine + F.interpolate(coarse, scale_factor=2.0, mode="nearest"))
        return [fine_out, self.pan_block(coarse + self.down_sample2(fine_out))]
