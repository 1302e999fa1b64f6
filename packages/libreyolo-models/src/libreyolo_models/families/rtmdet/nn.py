"""The RTMDet detection network: tensors in, tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is what a CUDA graph
captures. ``RTMDetNet.forward`` takes what upstream's network takes (mean/std-normalised BGR)
and returns what it returns, per-level class logits and l, t, r, b distances in input pixels,
so upstream checkpoints and test vectors apply unchanged. ``forward_rgb`` is the entry the zoo
uses: RGB in [0, 1], normalised inside the network (so inside a captured graph).

State-dict keys (``backbone.``, ``neck.``, ``head.``) match upstream LibreYOLO checkpoints with no
remapping; ``tests/test_rtmdet_upstream_compat.py`` pins them for every size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from ...layers.normalize import InputNormalize
from .blocks import ConvModule, CSPLayer, SPPBottleneck
from .input_stats import MEAN_RGB, STD_RGB

STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class RTMDetArch:
    """One size's architecture as data (upstream's deepen/widen factors, already applied).

    ``stages`` are the output channels of backbone stages 1-4 and ``blocks`` their CSPNeXt block
    counts; the neck reads stages 2-4 and outputs ``neck_out`` channels per level with
    ``neck_blocks`` blocks per CSP layer; ``exp_on_reg``: distances are ``exp(reg) * stride``
    (else ``reg * stride``).
    """

    stem: tuple[int, int]
    stages: tuple[int, int, int, int]
    blocks: tuple[int, int, int, int]
    neck_out: int
    neck_blocks: int
    exp_on_reg: bool


ARCHS: dict[str, RTMDetArch] = {
    "t": RTMDetArch((12, 24), (48, 96, 192, 384), (1, 1, 1, 1), 96, 1, False),
    "s": RTMDetArch((16, 32), (64, 128, 256, 512), (1, 2, 2, 1), 128, 1, False),
    "m": RTMDetArch((24, 48), (96, 192, 384, 768), (2, 4, 4, 2), 192, 2, True),
    "l": RTMDetArch((32, 64), (128, 256, 512, 1024), (3, 6, 6, 3), 256, 3, True),
    "x": RTMDetArch((40, 80), (160, 320, 640, 1280), (4, 8, 8, 4), 320, 4, True),
}


class CSPNeXt(nn.Module):
    """Stem (three 3x3 convs, the first at stride 2) and four stages, each a stride-2 conv then a
    CSP layer with channel attention (the last with SPP first and no residuals); returns the
    stride 8, 16 and 32 maps."""

    def __init__(self, arch: RTMDetArch) -> None:
        super().__init__()
        half, full = arch.stem
        self.stem = nn.Sequential(ConvModule(3, half, 3, 2), ConvModule(half, half, 3), ConvModule(half, full, 3))
        c_in, stages = full, []
        for i, (c_out, n) in enumerate(zip(arch.stages, arch.blocks)):
            last = i == len(arch.stages) - 1
            layers: list[nn.Module] = [ConvModule(c_in, c_out, 3, 2)]
            if last:
                layers.append(SPPBottleneck(c_out, c_out))
            layers.append(CSPLayer(c_out, c_out, n, add_identity=not last, attention=True))
            stages.append(nn.Sequential(*layers))
            c_in = c_out
        self.stage1, self.stage2, self.stage3, self.stage4 = stages  # registered in this order (checkpoint keys)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.stage1(self.stem(x))
        c3 = self.stage2(x)
        c4 = self.stage3(c3)
        return c3, c4, self.stage4(c4)


class CSPNeXtPAFPN(nn.Module):
    """Top-down (1x1 reduce, upsample, concat, CSP) then bottom-up (stride-2 conv, concat, CSP)
    path aggregation; a 3x3 conv brings every level to ``c_out`` channels."""

    def __init__(self, channels: tuple[int, int, int], c_out: int, n: int) -> None:
        super().__init__()
        c3, c4, c5 = channels
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.reduce_layers = nn.ModuleList((ConvModule(c5, c4, 1), ConvModule(c4, c3, 1)))
        self.top_down_blocks = nn.ModuleList((CSPLayer(2 * c4, c4, n, add_identity=False, attention=False),
                                              CSPLayer(2 * c3, c3, n, add_identity=False, attention=False)))
        self.downsamples = nn.ModuleList((ConvModule(c3, c3, 3, 2), ConvModule(c4, c4, 3, 2)))
        self.bottom_up_blocks = nn.ModuleList((CSPLayer(2 * c3, c4, n, add_identity=False, attention=False),
                                               CSPLayer(2 * c4, c5, n, add_identity=False, attention=False)))
        self.out_convs = nn.ModuleList(ConvModule(c, c_out, 3) for c in channels)

    def forward(self, c3: Tensor, c4: Tensor, c5: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        r5 = self.reduce_layers[0](c5)
        t4 = self.top_down_blocks[0](torch.cat((self.upsample(r5), c4), 1))
        r4 = self.reduce_layers[1](t4)
        n3 = self.top_down_blocks[1](torch.cat((self.upsample(r4), c3), 1))
        n4 = self.bottom_up_blocks[0](torch.cat((self.downsamples[0](n3), r4), 1))
        n5 = self.bottom_up_blocks[1](torch.cat((self.downsamples[1](n4), r5), 1))
        return tuple(conv(f) for conv, f in zip(self.out_convs, (n3, n4, n5)))


class SepBNHead(nn.Module):
    """Decoupled class / box branches, two 3x3 convs each, then a 1x1 prediction conv per level.

    The branch convs are shared across levels (level 1 and 2 hold the level-0 ``nn.Conv2d``
    itself) while every level keeps its own BatchNorm: one set of filters, per-scale statistics.
    The shared convs still appear under each level's state-dict key, as in upstream checkpoints.
    """

    def __init__(self, nc: int, channels: int, *, exp_on_reg: bool, stacked: int = 2) -> None:
        super().__init__()
        self.nc, self.exp_on_reg = nc, exp_on_reg
        levels = len(STRIDES)
        cls_convs = [[ConvModule(channels, channels, 3) for _ in range(stacked)] for _ in range(levels)]
        reg_convs = [[ConvModule(channels, channels, 3) for _ in range(stacked)] for _ in range(levels)]
        for level in range(1, levels):
            for i in range(stacked):
                cls_convs[level][i].conv = cls_convs[0][i].conv
                reg_convs[level][i].conv = reg_convs[0][i].conv
        self.cls_convs = nn.ModuleList(nn.ModuleList(convs) for convs in cls_convs)
        self.reg_convs = nn.ModuleList(nn.ModuleList(convs) for convs in reg_convs)
        self.rtm_cls = nn.ModuleList(nn.Conv2d(channels, nc, 1) for _ in range(levels))
        self.rtm_reg = nn.ModuleList(nn.Conv2d(channels, 4, 1) for _ in range(levels))
        self.initialize()

    def initialize(self, prior: float = 0.01) -> None:
        """Small random branch filters and a class bias at ``prior`` probability (RTMDet's start:
        every anchor begins as confident background, so the focal loss is not swamped)."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, std=0.01)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for conv in cast(Iterable[nn.Conv2d], self.rtm_cls):
            if conv.bias is not None:  # built with a bias
                nn.init.constant_(conv.bias, -math.log((1 - prior) / prior))

    def forward(self, feats: tuple[Tensor, ...]) -> tuple[list[Tensor], list[Tensor]]:
        """Per level: class logits ``[B, nc, H, W]`` and l, t, r, b distances ``[B, 4, H, W]`` in pixels."""
        cls_scores, distances = [], []
        for level, (f, stride) in enumerate(zip(feats, STRIDES)):
            cls_feat, reg_feat = f, f
            for layer in cast(nn.ModuleList, self.cls_convs[level]):
                cls_feat = layer(cls_feat)
            for layer in cast(nn.ModuleList, self.reg_convs[level]):
                reg_feat = layer(reg_feat)
            reg = self.rtm_reg[level](reg_feat)
            cls_scores.append(self.rtm_cls[level](cls_feat))
            distances.append((reg.exp() if self.exp_on_reg else reg) * stride)
        return cls_scores, distances


class InputBGR(nn.Module):
    """RGB in [0, 1] -> the mean/std-normalised BGR the network was trained on (no state-dict entries).

    Upstream's weights read BGR channels, normalised with mean (103.53, 116.28, 123.675) and std
    (57.375, 57.12, 58.395) on 0-255 values: the same as ImageNet statistics applied in RGB on
    [0, 1] followed by a channel flip, which is what this does.
    """

    def __init__(self) -> None:
        super().__init__()
        self.normalize = InputNormalize(MEAN_RGB, STD_RGB)

    def forward(self, images: Tensor) -> Tensor:
        return self.normalize(images).flip(1)


class RTMDetNet(nn.Module):
    """RTMDet detector network.

    ``forward`` input: ``float [B, 3, H, W]``, normalised BGR (upstream's input), H and W
    multiples of 32. Output ``(cls_scores, distances)``: per level (strides 8, 16, 32) class
    logits ``[B, nc, H/s, W/s]`` and l, t, r, b distances from the cell's top-left corner
    ``[B, 4, H/s, W/s]``, in input pixels. The same in train and eval mode.
    """

    def __init__(self, size: str = "s", nc: int = 80) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"unknown RTMDet size {size!r}; known sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = CSPNeXt(arch)
        self.neck = CSPNeXtPAFPN(arch.stages[1:], arch.neck_out, arch.neck_blocks)
        self.head = SepBNHead(nc, arch.neck_out, exp_on_reg=arch.exp_on_reg)
        self.input_bgr = InputBGR()

    def forward(self, x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        return self.head(self.neck(*self.backbone(x)))

    def forward_rgb(self, images: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """The zoo's entry: RGB in [0, 1] -> the raw per-level outputs (see the class docstring)."""
        return self(self.input_bgr(images))


def grid_corners(shapes: list[tuple[int, int]], strides: tuple[int, ...], *, device: torch.device,
                 dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Priors at cell top-left corners in pixels ``[A, 2]`` (x, y) and their strides ``[A, 1]``.

    RTMDet's priors sit at ``(x * stride, y * stride)`` (offset 0), not at cell centres: the
    distances its weights predict are measured from there. Row-major per level, levels in stride
    order. Built with ``arange`` on ``device`` (no host copy), so it is safe inside a CUDA graph.
    """
    points, stride_col = [], []
    for (h, w), s in zip(shapes, strides):
        ys = torch.arange(h, device=device, dtype=dtype) * s
        xs = torch.arange(w, device=device, dtype=dtype) * s
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((gx, gy), -1).view(-1, 2))
        stride_col.append(torch.full((h * w, 1), s, device=device, dtype=dtype))
    return torch.cat(points), torch.cat(stride_col)


def flatten_levels(cls_scores: list[Tensor], distances: list[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-level maps -> class logits ``[B, A, nc]``, xyxy boxes ``[B, A, 4]`` in pixels, and the
    priors ``[A, 2]`` and their strides ``[A]`` (levels concatenated in stride order)."""
    logits = torch.cat([c.flatten(2) for c in cls_scores], 2).transpose(1, 2)
    dist = torch.cat([d.flatten(2) for d in distances], 2).transpose(1, 2)
    points, strides = grid_corners([(c.shape[2], c.shape[3]) for c in cls_scores], STRIDES, device=dist.device,
                                   dtype=dist.dtype)
    lt, rb = dist.split(2, -1)
    return logits, torch.cat((points - lt, points + rb), -1), points, strides[:, 0]


def decode(cls_scores: list[Tensor], distances: list[Tensor]) -> Tensor:
    """Raw outputs -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then sigmoid class scores."""
    logits, boxes, _, _ = flatten_levels(cls_scores, distances)
    return torch.cat((boxes, logits.sigmoid()), -1).transpose(1, 2)
