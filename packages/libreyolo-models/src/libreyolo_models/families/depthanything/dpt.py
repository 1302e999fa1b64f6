"""The DPT head of Depth Anything V2: four token maps reassembled, fused coarse to fine, one depth map.

Facts from the official code (``depth_anything_v2/dpt.py``, ``util/blocks.py``; see
``docs/families/depthanything.md``), with its module names as attribute names (checkpoint keys):

- ``projects.<i>``: a 1x1 conv of each of the four token maps (``[B, C, h, w]``, h, w the patch
  grid) to ``out_channels[i]``; ``resize_layers``: 4x and 2x transposed convolutions, identity, and
  a 3x3 stride-2 convolution, giving maps at 4x, 2x, 1x and 1/2 the patch grid;
- ``scratch.layer<i>_rn``: 3x3 convs (no bias) to ``features`` channels;
- ``scratch.refinenet<i>``: fusion blocks, deepest first: the running map plus a residual unit of
  the skip map, another residual unit, a bilinear resize (align_corners=True) to the next skip's
  size (the last one: 2x), a 1x1 ``out_conv``. A residual unit is ``x + conv2(relu(conv1(relu(x))))``
  (3x3 convs with biases; the official configuration has no BatchNorm);
- ``scratch.output_conv1`` (3x3, half the features), a bilinear resize (align_corners=True) to the
  input's size, ``scratch.output_conv2``: 3x3 to 32, ReLU, 1x1 to 1, ReLU.

The class tokens are not used (the official ``use_clstoken=False``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

HEAD_HIDDEN = 32  # output_conv2's hidden width


class ResidualConvUnit(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, 3, padding=1)
        self.conv2 = nn.Conv2d(features, features, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(F.relu(self.conv1(F.relu(x))))


class FeatureFusionBlock(nn.Module):
    """``x`` (+ a residual unit of ``skip``), a residual unit, resized, a 1x1 conv."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, 1)
        self.resConfUnit1 = ResidualConvUnit(features)  # noqa: N815 - the official checkpoint key
        self.resConfUnit2 = ResidualConvUnit(features)  # noqa: N815

    def forward(self, x: Tensor, skip: Tensor | None = None, size: Sequence[int] | None = None) -> Tensor:
        if skip is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        if size is None:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        else:
            x = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=True)
        return self.out_conv(x)


class Scratch(nn.Module):
    """The official ``scratch`` namespace: per-level 3x3 convs, fusion blocks, output convs."""

    def __init__(self, out_channels: Sequence[int], features: int) -> None:
        super().__init__()
        c1, c2, c3, c4 = out_channels
        self.layer1_rn = nn.Conv2d(c1, features, 3, padding=1, bias=False)
        self.layer2_rn = nn.Conv2d(c2, features, 3, padding=1, bias=False)
        self.layer3_rn = nn.Conv2d(c3, features, 3, padding=1, bias=False)
        self.layer4_rn = nn.Conv2d(c4, features, 3, padding=1, bias=False)
        self.refinenet1 = FeatureFusionBlock(features)
        self.refinenet2 = FeatureFusionBlock(features)
        self.refinenet3 = FeatureFusionBlock(features)
        self.refinenet4 = FeatureFusionBlock(features)
        self.output_conv1 = nn.Conv2d(features, features // 2, 3, padding=1)
        self.output_conv2 = nn.Sequential(nn.Conv2d(features // 2, HEAD_HIDDEN, 3, padding=1), nn.ReLU(True),
                                          nn.Conv2d(HEAD_HIDDEN, 1, 1), nn.ReLU(True), nn.Identity())


class DPTHead(nn.Module):
    """Four ``[B, patches, C]`` token maps on a ``rows x cols`` patch grid -> ``[B, 1, H, W]`` depth
    at ``patch`` times the grid (the network's input size)."""

    def __init__(self, width: int, features: int, out_channels: Sequence[int], patch: int) -> None:
        super().__init__()
        if len(out_channels) != 4:
            raise ValueError(f"the DPT head takes four levels, got out_channels={tuple(out_channels)}")
        self.patch = patch
        self.projects = nn.ModuleList(nn.Conv2d(width, c, 1) for c in out_channels)
        self.resize_layers = nn.ModuleList([
            nn.ConvTranspose2d(out_channels[0], out_channels[0], 4, stride=4),
            nn.ConvTranspose2d(out_channels[1], out_channels[1], 2, stride=2),
            nn.Identity(),
            nn.Conv2d(out_channels[3], out_channels[3], 3, stride=2, padding=1),
        ])
        self.scratch: Scratch = Scratch(out_channels, features)

    def forward(self, tokens: Sequence[Tensor], rows: int, cols: int) -> Tensor:
        maps = []
        for i, x in enumerate(tokens):
            x = x.transpose(1, 2).reshape(x.shape[0], x.shape[-1], rows, cols)
            maps.append(self.resize_layers[i](self.projects[i](x)))
        s: Scratch = self.scratch
        l1, l2, l3, l4 = s.layer1_rn(maps[0]), s.layer2_rn(maps[1]), s.layer3_rn(maps[2]), s.layer4_rn(maps[3])
        path = s.refinenet4(l4, size=l3.shape[2:])
        path = s.refinenet3(path, l3, size=l2.shape[2:])
        path = s.refinenet2(path, l2, size=l1.shape[2:])
        path = s.refinenet1(path, l1)
        out = F.interpolate(s.output_conv1(path), size=(rows * self.patch, cols * self.patch), mode="bilinear",
                            align_corners=True)
        return s.output_conv2(out)
