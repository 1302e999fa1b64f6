"""The YOLOX detection network (CSPDarknet + PAFPN + decoupled head): tensors in, tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is exactly what a CUDA
graph captures. It returns the same dict in train and eval mode; the caller decides what comes
next (loss on ``raw_outputs``, post-processing on ``predictions``).

State-dict keys match upstream LibreYOLO (and original YOLOX) checkpoints with no remapping:
``backbone.backbone.*`` is CSPDarknet, the rest of ``backbone.*`` the PAFPN, ``head.*`` the head;
``tests/test_yolox_upstream_compat.py`` pins every key, shape and dtype for all six sizes.

Input convention: those checkpoints were trained on BGR pixels in 0..255, while every seam of this
project hands networks RGB in [0, 1]. ``to_upstream_input`` converts inside the network, so the
conversion is part of the captured graph and upstream weights see the pixels they were trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, level_shapes
from ...layers.conv import Conv
from .blocks import CSPLayer, Focus, SPPBottleneck, spatial_conv

STRIDES = (8, 16, 32)
PRIOR_PROB = 0.01  # initial objectness and class probability (upstream's bias initialisation)


@dataclass(frozen=True)
class YoloxArch:
    """One size as data.

    Attributes:
        width: stem channels (64 x upstream's width multiplier); the stages have 2, 4, 8 and 16
            times as many, the PAFPN outputs 4/8/16 times, the head 4 times.
        depth: bottlenecks per CSP layer (upstream's ``round(3 x depth multiplier)``; dark3 and
            dark4 have three times as many).
        depthwise: depthwise-separable 3x3 convs (nano).
    """

    width: int
    depth: int
    depthwise: bool = False


ARCHS: dict[str, YoloxArch] = {
    "n": YoloxArch(16, 1, depthwise=True),   # width 0.25, depth 0.33
    "t": YoloxArch(24, 1),                   # width 0.375, depth 0.33
    "s": YoloxArch(32, 1),                   # width 0.50, depth 0.33
    "m": YoloxArch(48, 2),                   # width 0.75, depth 0.67
    "l": YoloxArch(64, 3),                   # width 1.00, depth 1.00
    "x": YoloxArch(80, 4),                   # width 1.25, depth 1.33
}


def to_upstream_input(images: Tensor) -> Tensor:
    """RGB in [0, 1] -> BGR in [0, 255], what YOLOX weights expect (a flip and a scale, on device)."""
    return images.flip(1) * 255.0


class CSPDarknet(nn.Module):
    """Focus stem and four CSP stages; returns the stride 8, 16 and 32 feature maps."""

    def __init__(self, arch: YoloxArch) -> None:
        super().__init__()
        w, d, dw = arch.width, arch.depth, arch.depthwise
        self.stem = Focus(3, w)
        self.dark2 = nn.Sequential(spatial_conv(w, 2 * w, 3, 2, dw), CSPLayer(2 * w, 2 * w, d, depthwise=dw))
        self.dark3 = nn.Sequential(spatial_conv(2 * w, 4 * w, 3, 2, dw), CSPLayer(4 * w, 4 * w, 3 * d, depthwise=dw))
        self.dark4 = nn.Sequential(spatial_conv(4 * w, 8 * w, 3, 2, dw), CSPLayer(8 * w, 8 * w, 3 * d, depthwise=dw))
        self.dark5 = nn.Sequential(spatial_conv(8 * w, 16 * w, 3, 2, dw), SPPBottleneck(16 * w, 16 * w),
                                   CSPLayer(16 * w, 16 * w, d, shortcut=False, depthwise=dw))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c3 = self.dark3(self.dark2(self.stem(x)))
        c4 = self.dark4(c3)
        return c3, c4, self.dark5(c4)


class PAFPN(nn.Module):
    """The backbone plus top-down and bottom-up path aggregation.

    Upstream nests CSPDarknet inside the PAFPN as ``backbone``, hence the ``backbone.backbone.``
    keys; the other attribute names (``C3_p4``, ``bu_conv2``, ...) are upstream's too.
    """

    def __init__(self, arch: YoloxArch) -> None:
        super().__init__()
        c3, c4, c5 = 4 * arch.width, 8 * arch.width, 16 * arch.width
        d, dw = arch.depth, arch.depthwise
        self.backbone = CSPDarknet(arch)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.lateral_conv0 = Conv(c5, c4, 1)
        self.C3_p4 = CSPLayer(2 * c4, c4, d, shortcut=False, depthwise=dw)
        self.reduce_conv1 = Conv(c4, c3, 1)
        self.C3_p3 = CSPLayer(2 * c3, c3, d, shortcut=False, depthwise=dw)
        self.bu_conv2 = spatial_conv(c3, c3, 3, 2, dw)
        self.C3_n3 = CSPLayer(2 * c3, c4, d, shortcut=False, depthwise=dw)
        self.bu_conv1 = spatial_conv(c4, c4, 3, 2, dw)
        self.C3_n4 = CSPLayer(2 * c4, c5, d, shortcut=False, depthwise=dw)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x3, x4, x5 = self.backbone(x)
        top5 = self.lateral_conv0(x5)
        p4 = self.C3_p4(torch.cat((self.upsample(top5), x4), 1))
        top4 = self.reduce_conv1(p4)
        out3 = self.C3_p3(torch.cat((self.upsample(top4), x3), 1))
        out4 = self.C3_n3(torch.cat((self.bu_conv2(out3), top4), 1))
        out5 = self.C3_n4(torch.cat((self.bu_conv1(out4), top5), 1))
        return out3, out4, out5


class YoloxHead(nn.Module):
    """Decoupled head: per level a 1x1 stem, then a class branch and a box branch (two 3x3 convs
    each); the box branch also predicts objectness.

    The ``nn.ModuleList`` attributes are created in upstream's order (``cls_convs``, ``reg_convs``,
    ``cls_preds``, ``reg_preds``, ``obj_preds``, ``stems``), which is the state dict's key order.
    """

    def __init__(self, nc: int, in_channels: tuple[int, int, int], width: int, depthwise: bool) -> None:
        super().__init__()
        self.nc = nc
        self.cls_convs = nn.ModuleList(self._branch(width, depthwise) for _ in in_channels)
        self.reg_convs = nn.ModuleList(self._branch(width, depthwise) for _ in in_channels)
        self.cls_preds = nn.ModuleList(nn.Conv2d(width, nc, 1) for _ in in_channels)
        self.reg_preds = nn.ModuleList(nn.Conv2d(width, 4, 1) for _ in in_channels)
        self.obj_preds = nn.ModuleList(nn.Conv2d(width, 1, 1) for _ in in_channels)
        self.stems = nn.ModuleList(Conv(c, width, 1) for c in in_channels)
        self.anchors = AnchorCache(STRIDES, offset=0.0)  # cell corners

    @staticmethod
    def _branch(width: int, depthwise: bool) -> nn.Sequential:
        return nn.Sequential(spatial_conv(width, width, 3, 1, depthwise), spatial_conv(width, width, 3, 1, depthwise))

    def initialize_biases(self, prior_prob: float = PRIOR_PROB) -> None:
        """Start every objectness and class probability at ``prior_prob``: the loss then begins near
        its background value instead of being swamped by thousands of confident false positives."""
        bias = -math.log((1 - prior_prob) / prior_prob)
        for conv in (*self.cls_preds, *self.obj_preds):
            nn.init.constant_(conv.bias, bias)

    def raw_maps(self, feats: tuple[Tensor, ...]) -> list[Tensor]:
        """Per level ``[B, 5 + nc, H, W]``: tx, ty, tw, th, objectness logit, class logits."""
        maps = []
        for k, x in enumerate(feats):
            x = self.stems[k](x)
            reg = self.reg_convs[k](x)
            maps.append(torch.cat((self.reg_preds[k](reg), self.obj_preds[k](reg),
                                   self.cls_preds[k](self.cls_convs[k](x))), 1))
        return maps

    @staticmethod
    def levels(raw: list[Tensor]) -> list[Tensor]:
        """Upstream's eval-mode output: per level the raw box offsets, then sigmoid objectness and
        sigmoid class scores, ``[B, 5 + nc, H, W]``."""
        return [torch.cat((r[:, :4], r[:, 4:].sigmoid()), 1) for r in raw]

    def decode(self, raw: list[Tensor]) -> Tensor:
        """Raw maps -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then objectness x class score.

        Each cell decodes from its corner (grid offset 0): centre ``(t + g) * s``, size ``exp(t) * s``.
        """
        flat = torch.cat([r.flatten(2) for r in raw], 2)  # [B, 5 + nc, A]
        grid, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
        grid, strides = grid.t().unsqueeze(0), strides.t().unsqueeze(0)  # [1, 2, A], [1, 1, A]
        centre = (flat[:, :2] + grid) * strides
        half = flat[:, 2:4].exp() * strides / 2
        scores = flat[:, 4:5].sigmoid() * flat[:, 5:].sigmoid()
        return torch.cat((centre - half, centre + half, scores), 1)


class YoloxNet(nn.Module):
    """YOLOX detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then objectness x class
        probability per class; anchors row-major per level, levels in stride order 8, 16, 32.
        ``raw_outputs`` list of ``[B, 5 + nc, H/s, W/s]``: tx, ty, tw, th, objectness logit,
        class logits; what the loss reads.
    """

    def __init__(self, size: str = "s", nc: int = 80) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"unknown YOLOX size {size!r}; known sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = PAFPN(arch)
        self.head = YoloxHead(nc, (4 * arch.width, 8 * arch.width, 16 * arch.width), 4 * arch.width,
                              arch.depthwise)
        self.head.initialize_biases()

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """Only what the loss reads (the training graph seam): the three raw head maps."""
        return self.head.raw_maps(self.backbone(to_upstream_input(images)))

    def upstream_outputs(self, x: Tensor) -> list[Tensor]:
        """Upstream's eval-mode forward on its own input convention (BGR, 0..255): per level raw
        box offsets, sigmoid objectness, sigmoid class scores. What the compatibility vectors hold."""
        return self.head.levels(self.head.raw_maps(self.backbone(x)))

    def forward(self, images: Tensor) -> dict[str, Tensor | list[Tensor]]:
        raw = self.raw_outputs(images)
        return {"predictions": self.head.decode(raw), "raw_outputs": raw}
