"""BiRefNet's decoder blocks, each cut where its deformable convolutions run.

A decoder block (``BasicDecBlk``) is conv-BN-ReLU, a deformable ASPP, conv-BN. The ASPP has four
branches of deformable convolution (kernel 1, 1, 3, 7), a global-pool branch, a 1x1 fusion, BN,
ReLU and dropout. Each deformable convolution (``DeformableConv2d``) computes its offsets and its
modulation (``2 * sigmoid``) with plain convolutions, then samples through
``torchvision.ops.deform_conv2d`` with ``regular_conv``'s weight: the official module's eager
numerics. So that the plain work can be graphed and the sampling left eager, a block runs in three
calls: :meth:`DecoderBlock.enter` (everything up to the four samplings' inputs),
:func:`deform_branches` (the four ``deform_conv2d`` calls) and :meth:`DecoderBlock.leave` (the
rest). ``forward`` is those three in turn. Keys follow the official ``decoder_blocks.py`` /
``aspp.py`` / ``deform_conv.py``: ``conv_in``, ``bn_in``, ``dec_att.aspp1.atrous_conv.{offset_conv,
modulator_conv,regular_conv}``, ``dec_att.aspp1.bn``, ``dec_att.aspp_deforms.<i>...``,
``dec_att.global_avg_pool.{1,2}``, ``dec_att.conv1``, ``dec_att.bn1``, ``conv_out``, ``bn_out``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import deform_conv2d

ASPP_WIDTH = 256  # the official in_channelster
INTER = 64        # the official fixed inter_channels of a decoder block
KERNELS = (1, 1, 3, 7)  # aspp1, then aspp_deforms' parallel_block_sizes


class DeformableConv2d(nn.Module):
    """Offsets and modulation from plain convolutions, sampling by ``deform_conv2d`` (stride 1)."""

    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        super().__init__()
        self.padding = kernel // 2
        self.offset_conv = nn.Conv2d(cin, 2 * kernel * kernel, kernel, 1, self.padding)
        self.modulator_conv = nn.Conv2d(cin, kernel * kernel, kernel, 1, self.padding)
        for conv in (self.offset_conv, self.modulator_conv):  # the official zero start: a plain conv at first
            nn.init.zeros_(conv.weight)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        self.regular_conv = nn.Conv2d(cin, cout, kernel, 1, self.padding, bias=False)

    def sampling_inputs(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(offsets, modulation): the graphable half."""
        return self.offset_conv(x), 2.0 * torch.sigmoid(self.modulator_conv(x))

    def sample(self, x: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        """The deformable sampling itself (always eager in the segmented graph path)."""
        return deform_conv2d(x, offset, self.regular_conv.weight, self.regular_conv.bias,
                             padding=(self.padding, self.padding), mask=mask)

    def forward(self, x: Tensor) -> Tensor:
        return self.sample(x, *self.sampling_inputs(x))


class DeformBranch(nn.Module):
    """``_ASPPModuleDeformable``: deformable conv, BN, ReLU."""

    def __init__(self, cin: int, kernel: int) -> None:
        super().__init__()
        self.atrous_conv = DeformableConv2d(cin, ASPP_WIDTH, kernel)
        self.bn = nn.BatchNorm2d(ASPP_WIDTH)

    def finish(self, sampled: Tensor) -> Tensor:
        return F.relu(self.bn(sampled))


class ASPPDeformable(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.aspp1 = DeformBranch(cin, KERNELS[0])
        self.aspp_deforms = nn.ModuleList([DeformBranch(cin, k) for k in KERNELS[1:]])
        self.global_avg_pool = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Conv2d(cin, ASPP_WIDTH, 1, bias=False),
                                             nn.BatchNorm2d(ASPP_WIDTH), nn.ReLU())
        self.conv1 = nn.Conv2d(ASPP_WIDTH * (2 + len(self.aspp_deforms)), cin, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.dropout = nn.Dropout(0.5)

    def branches(self) -> list[DeformBranch]:
        return [self.aspp1, *self.aspp_deforms]


def deform_branches(block: DecoderBlock, h: Tensor, *sampling: Tensor) -> tuple[Tensor, ...]:
    """The eager seam of ``block``: ``h`` and the branches' (offsets, modulation) pairs -> ``h``
    and the four sampled maps."""
    branches = block.dec_att.branches()
    return (h, *(b.atrous_conv.sample(h, sampling[2 * i], sampling[2 * i + 1]) for i, b in enumerate(branches)))


class DecoderBlock(nn.Module):
    """``BasicDecBlk`` with a deformable ASPP: ``[B, cin, h, w]`` -> ``[B, cout, h, w]``."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(cin, INTER, 3, 1, 1)
        self.dec_att = ASPPDeformable(INTER)
        self.conv_out = nn.Conv2d(INTER, cout, 3, 1, 1)
        self.bn_in = nn.BatchNorm2d(INTER)
        self.bn_out = nn.BatchNorm2d(cout)

    def enter(self, x: Tensor) -> tuple[Tensor, ...]:
        """-> ``h`` (the ASPP's input) and each branch's offsets and modulation, in branch order."""
        h = F.relu(self.bn_in(self.conv_in(x)))
        return (h, *(t for b in self.dec_att.branches() for t in b.atrous_conv.sampling_inputs(h)))

    def leave(self, h: Tensor, *sampled: Tensor) -> Tensor:
        """``h`` and the four sampled maps -> the block's output."""
        att = self.dec_att
        pooled = att.global_avg_pool(h)
        parts = [b.finish(s) for b, s in zip(att.branches(), sampled)]
        parts.append(F.interpolate(pooled, size=parts[0].shape[2:], mode="bilinear", align_corners=True))
        fused = att.dropout(F.relu(att.bn1(att.conv1(torch.cat(parts, 1)))))
        return self.bn_out(self.conv_out(fused))

    def forward(self, x: Tensor) -> Tensor:
        return self.leave(*deform_branches(self, *self.enter(x)))


class SimpleConvs(nn.Module):
    """The decoder's image-patch input blocks (``ipt_blk*``): two 3x3 convs, no activation."""

    def __init__(self, cin: int, cout: int, inter: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, inter, 3, 1, 1)
        self.conv_out = nn.Conv2d(inter, cout, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv_out(self.conv1(x))
