"""The PicoDet detection network (ESNet backbone, CSP-PAN neck with a fourth, stride-64 level,
GFL head with a shared class/box output): tensors in, tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is what a CUDA graph
captures. ``PicoDetNet.upstream_outputs`` (and ``forward``) takes what upstream's network takes
(ImageNet-normalised RGB) and returns what it returns; ``raw_outputs`` / ``predictions`` take the
zoo's RGB in [0, 1] and normalise inside the network (so inside a captured graph).

State-dict keys (``backbone.``, ``neck.``, ``head.``) match upstream LibreYOLO's PicoDet with no
remapping; ``tests/test_picodet_upstream_compat.py`` pins them for s, m and l.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, dfl_expectation, distances_to_boxes, level_shapes
from ...layers.normalize import InputNormalize
from .blocks import ConvBNAct, CSPLayer, DepthwiseSeparable, ESBlock, ESBlockDS

STRIDES = (8, 16, 32, 64)
BINS = 8  # DFL bins per box side (upstream's reg_max = 7)
PRIOR_PROB = 0.01
# ImageNet statistics on RGB in [0, 1]: upstream's (123.675, 116.28, 103.53) / (58.395, 57.12,
# 57.375) on 0-255 RGB, divided by 255.
MEAN_RGB = (0.485, 0.456, 0.406)
STD_RGB = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class PicoDetArch:
    """One size as data: ESNet's width scale and per-block channel ratios, the neck and head
    width, and the head's stacked depthwise-separable convs per level."""

    scale: float
    ratios: tuple[float, ...]
    width: int
    head_convs: int


_RATIOS_ML = (0.875, 0.5, 1.0, 0.625, 0.5, 0.75, 0.625, 0.625, 0.5, 0.625, 1.0, 0.625, 0.75)
ARCHS: dict[str, PicoDetArch] = {
    "s": PicoDetArch(0.75, (0.875, 0.5, 0.5, 0.5, 0.625, 0.5, 0.625, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 96, 2),
    "m": PicoDetArch(1.0, _RATIOS_ML, 128, 4),
    "l": PicoDetArch(1.25, _RATIOS_ML, 160, 4),
}
_STAGE_REPEATS = (3, 7, 3)


def make_divisible(value: float, divisor: int) -> int:
    """Round to the nearest multiple of ``divisor`` (at least ``divisor``), never below 90 % of ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ESNet(nn.Module):
    """Enhanced ShuffleNet: a stride-2 3x3 conv and a max-pool, then three stages of ES blocks
    (3, 7 and 3; each starts with a stride-2 block); returns the stride 8, 16 and 32 maps."""

    def __init__(self, arch: PicoDetArch) -> None:
        super().__init__()
        channels = [24] + [make_divisible(c * arch.scale, 16) for c in (128, 256, 512)]
        self.out_channels = tuple(channels[1:])
        self.conv1 = ConvBNAct(3, channels[0], 3, 2)
        self.max_pool = nn.MaxPool2d(3, 2, 1)
        blocks: list[nn.Module] = []
        for stage, repeats in enumerate(_STAGE_REPEATS):
            c_out = channels[stage + 1]
            for i in range(repeats):
                mid = make_divisible(int(c_out * arch.ratios[len(blocks)]), 8)
                blocks.append(ESBlockDS(channels[stage], mid, c_out) if i == 0 else ESBlock(c_out, mid, c_out))
        self.blocks = nn.ModuleList(blocks)
        self.out_blocks = tuple(sum(_STAGE_REPEATS[:i + 1]) - 1 for i in range(3))  # 2, 9, 12

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.max_pool(self.conv1(x))
        outs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.out_blocks:
                outs.append(x)
        return outs


class CSPPAN(nn.Module):
    """CSP path aggregation over the three backbone maps (each first projected to ``width``),
    plus a fourth level: the sum of two stride-2 depthwise-separable convs, one on the projected
    stride-32 input, one on the stride-32 output."""

    def __init__(self, in_channels: tuple[int, ...], width: int, k: int = 5) -> None:
        super().__init__()
        self.trans = nn.ModuleList(ConvBNAct(c, width, 1) for c in in_channels)
        self.first_top_conv = DepthwiseSeparable(width, width, k, 2)
        self.second_top_conv = DepthwiseSeparable(width, width, k, 2)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        levels = len(in_channels) - 1
        self.top_down_blocks = nn.ModuleList(CSPLayer(2 * width, width, 1, k) for _ in range(levels))
        self.downsamples = nn.ModuleList(DepthwiseSeparable(width, width, k, 2) for _ in range(levels))
        self.bottom_up_blocks = nn.ModuleList(CSPLayer(2 * width, width, 1, k) for _ in range(levels))

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        feats = [trans(x) for trans, x in zip(self.trans, inputs)]
        inner = [feats[-1]]
        for i, block in enumerate(self.top_down_blocks):  # stride 32 -> 16 -> 8
            inner.insert(0, block(torch.cat((self.upsample(inner[0]), feats[-2 - i]), 1)))
        outs = [inner[0]]
        for i, (down, block) in enumerate(zip(self.downsamples, self.bottom_up_blocks)):  # 8 -> 16 -> 32
            outs.append(block(torch.cat((down(outs[-1]), inner[i + 1]), 1)))
        outs.append(self.first_top_conv(feats[-1]) + self.second_top_conv(outs[-1]))
        return outs


class PicoHead(nn.Module):
    """Per level, ``head_convs`` depthwise-separable 5x5 convs and one 1x1 conv (``gfl_cls``) whose
    output holds the class logits then the box-side logits (4 sides x 8 bins)."""

    def __init__(self, nc: int, width: int, head_convs: int, levels: int = len(STRIDES), k: int = 5) -> None:
        super().__init__()
        self.nc = nc
        self.cls_convs = nn.ModuleList(
            nn.Sequential(*(DepthwiseSeparable(width, width, k) for _ in range(head_convs))) for _ in range(levels))
        outputs = [nn.Conv2d(width, nc + 4 * BINS, 1) for _ in range(levels)]
        self.gfl_cls = nn.ModuleList(outputs)
        for module in self.modules():  # upstream: Normal(0, 0.01) convs, unit BatchNorms
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, std=0.01)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        with torch.no_grad():
            for conv in outputs:
                if conv.bias is not None:  # built with a bias; the check is for the type checker
                    conv.bias[:nc] = -math.log((1 - PRIOR_PROB) / PRIOR_PROB)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        """Per level ``[B, nc + 32, H, W]``: class logits, then box-side logits (side-major)."""
        return [out(convs(x)) for convs, out, x in zip(self.cls_convs, self.gfl_cls, feats)]


def decode(raw: list[Tensor], nc: int, anchors: AnchorCache) -> Tensor:
    """Raw maps -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels (cell centre -/+ the DFL
    expectation times the stride), then sigmoid class scores; levels in stride order, row-major."""
    flat = torch.cat([r.flatten(2) for r in raw], 2)  # [B, nc + 32, A]
    points, strides = anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
    dist = dfl_expectation(flat[:, nc:], BINS)
    boxes = distances_to_boxes(dist, points.t().unsqueeze(0), dim=1) * strides.t().unsqueeze(0)
    return torch.cat((boxes, flat[:, :nc].sigmoid()), 1)


class PicoDetNet(nn.Module):
    """PicoDet detector network.

    ``forward`` / ``upstream_outputs`` input: ``float [B, 3, H, W]``, ImageNet-normalised RGB
    (upstream's input), H and W multiples of 32 (the fourth level is ``ceil(H / 64)``). Output
    ``(cls_scores, box_logits)``: per level (strides 8, 16, 32, 64) class logits ``[B, nc, H/s,
    W/s]`` and box-side logits ``[B, 32, H/s, W/s]``, upstream's eval output. ``raw_outputs`` and
    ``predictions`` (the seams) take RGB in [0, 1].
    """

    def __init__(self, size: str = "s", nc: int = 80) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"unknown PicoDet size {size!r}; known sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = ESNet(arch)
        self.neck = CSPPAN(self.backbone.out_channels, arch.width)
        self.head = PicoHead(nc, arch.width, arch.head_convs)
        self.normalize = InputNormalize(MEAN_RGB, STD_RGB)
        self.anchors = AnchorCache(STRIDES)  # cell centres
        for module in (*self.backbone.modules(), *self.neck.modules()):  # upstream's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def maps(self, x: Tensor) -> list[Tensor]:
        """Upstream's input -> per level ``[B, nc + 32, H/s, W/s]``."""
        return self.head(self.neck(self.backbone(x)))

    def upstream_outputs(self, x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Upstream's eval-mode forward on its own input (ImageNet-normalised RGB): per level class
        logits and box-side logits. What the compatibility vectors hold."""
        maps = self.maps(x)
        return [m[:, :self.nc] for m in maps], [m[:, self.nc:] for m in maps]

    def forward(self, x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        return self.upstream_outputs(x)

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """RGB in [0, 1] -> the four raw head maps (the training seam)."""
        return self.maps(self.normalize(images))

    def predictions(self, images: Tensor) -> Tensor:
        """RGB in [0, 1] -> ``[B, 4 + nc, A]`` (the inference seam; see ``decode``)."""
        return decode(self.raw_outputs(images), self.nc, self.anchors)
