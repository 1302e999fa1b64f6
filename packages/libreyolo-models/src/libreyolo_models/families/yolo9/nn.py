"""The YOLOv9 (GELAN) detection network: tensors in, tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is exactly what a CUDA
graph captures. It returns the same dict in train and eval mode; the caller decides what comes
next (loss on ``raw_outputs``, post-processing on ``predictions``).

State-dict keys (``backbone.``, ``neck.``, ``head.`` and everything below) match upstream
LibreYOLO checkpoints with no remapping; ``tests/test_yolo9_upstream_compat.py`` pins them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, dfl_expectation, distances_to_boxes, level_shapes
from ...layers.conv import Conv
from .blocks import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4

STRIDES = (8, 16, 32)
REG_MAX = 16


@dataclass(frozen=True)
class Yolo9Arch:
    """One size's architecture as data.

    ``stages`` lists, per GELAN block, ``(c_in, c_out, c_mid, c_branch)``; the repeat count ``n``
    and block types are per size. Inputs of neck blocks include their concatenated skips.
    """

    stem: tuple[int, int]                       # conv0, conv1 output channels
    light_first_block: bool                     # t/s use ELAN1 for elan1, m/c a RepNCSPELAN4
    elan1: tuple[int, int, int, int]
    downsampler: str                            # "aconv" (t/s/m) or "adown" (c)
    down: tuple[tuple[int, int], ...]           # backbone down2..down4 (c_in, c_out)
    elan: tuple[tuple[int, int, int, int], ...]  # backbone elan2..elan4
    spp: tuple[int, int, int]                   # (c_in, c_out, c_mid)
    neck_up: tuple[tuple[int, int, int, int], ...]      # elan_up1, elan_up2
    neck_down: tuple[tuple[int, int], ...]              # neck down1, down2
    neck_elan: tuple[tuple[int, int, int, int], ...]    # elan_down1, elan_down2
    n: int                                       # RepNCSP depth

    @property
    def head_channels(self) -> tuple[int, int, int]:
        return (self.neck_up[1][1], self.neck_elan[0][1], self.neck_elan[1][1])


ARCHS: dict[str, Yolo9Arch] = {
    "t": Yolo9Arch(
        stem=(16, 32), light_first_block=True, elan1=(32, 32, 32, 16), downsampler="aconv",
        down=((32, 64), (64, 96), (96, 128)),
        elan=((64, 64, 64, 32), (96, 96, 96, 48), (128, 128, 128, 64)), spp=(128, 128, 64),
        neck_up=((224, 96, 96, 48), (160, 64, 64, 32)), neck_down=((64, 48), (96, 64)),
        neck_elan=((144, 96, 96, 48), (192, 128, 128, 64)), n=3),
    "s": Yolo9Arch(
        stem=(32, 64), light_first_block=True, elan1=(64, 64, 64, 32), downsampler="aconv",
        down=((64, 128), (128, 192), (192, 256)),
        elan=((128, 128, 128, 64), (192, 192, 192, 96), (256, 256, 256, 128)), spp=(256, 256, 128),
        neck_up=((448, 192, 192, 96), (320, 128, 128, 64)), neck_down=((128, 96), (192, 128)),
        neck_elan=((288, 192, 192, 96), (384, 256, 256, 128)), n=3),
    "m": Yolo9Arch(
        stem=(32, 64), light_first_block=False, elan1=(64, 128, 128, 64), downsampler="aconv",
        down=((128, 240), (240, 360), (360, 480)),
        elan=((240, 240, 240, 120), (360, 360, 360, 180), (480, 480, 480, 240)), spp=(480, 480, 240),
        neck_up=((840, 360, 360, 180), (600, 240, 240, 120)), neck_down=((240, 184), (360, 240)),
        neck_elan=((544, 360, 360, 180), (720, 480, 480, 240)), n=1),
    "c": Yolo9Arch(
        stem=(64, 128), light_first_block=False, elan1=(128, 256, 128, 64), downsampler="adown",
        down=((256, 256), (512, 512), (512, 512)),
        elan=((256, 512, 256, 128), (512, 512, 512, 256), (512, 512, 512, 256)), spp=(512, 512, 256),
        neck_up=((1024, 512, 512, 256), (1024, 256, 256, 128)), neck_down=((256, 256), (512, 512)),
        neck_elan=((768, 512, 512, 256), (1024, 512, 512, 256)), n=1),
}


def _downsampler(kind: str, c_in: int, c_out: int) -> nn.Module:
    return AConv(c_in, c_out) if kind == "aconv" else ADown(c_in, c_out)


class Backbone(nn.Module):
    """Stem, four GELAN stages and SPP-ELAN; returns the stride 8, 16 and 32 feature maps."""

    def __init__(self, arch: Yolo9Arch) -> None:
        super().__init__()
        self.conv0 = Conv(3, arch.stem[0], 3, 2)
        self.conv1 = Conv(arch.stem[0], arch.stem[1], 3, 2)
        self.elan1 = ELAN1(*arch.elan1) if arch.light_first_block else RepNCSPELAN4(*arch.elan1, arch.n)
        self.down2 = _downsampler(arch.downsampler, *arch.down[0])
        self.elan2 = RepNCSPELAN4(*arch.elan[0], arch.n)
        self.down3 = _downsampler(arch.downsampler, *arch.down[1])
        self.elan3 = RepNCSPELAN4(*arch.elan[1], arch.n)
        self.down4 = _downsampler(arch.downsampler, *arch.down[2])
        self.elan4 = RepNCSPELAN4(*arch.elan[2], arch.n)
        self.spp = SPPELAN(*arch.spp)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.elan1(self.conv1(self.conv0(x)))
        p3 = self.elan2(self.down2(x))
        p4 = self.elan3(self.down3(p3))
        p5 = self.spp(self.elan4(self.down4(p4)))
        return p3, p4, p5


class Neck(nn.Module):
    """Top-down then bottom-up path aggregation over the three backbone levels."""

    def __init__(self, arch: Yolo9Arch) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.elan_up1 = RepNCSPELAN4(*arch.neck_up[0], arch.n)
        self.elan_up2 = RepNCSPELAN4(*arch.neck_up[1], arch.n)
        self.down1 = _downsampler(arch.downsampler, *arch.neck_down[0])
        self.elan_down1 = RepNCSPELAN4(*arch.neck_elan[0], arch.n)
        self.down2 = _downsampler(arch.downsampler, *arch.neck_down[1])
        self.elan_down2 = RepNCSPELAN4(*arch.neck_elan[1], arch.n)

    def forward(self, p3: Tensor, p4: Tensor, p5: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        n4 = self.elan_up1(torch.cat((self.up(p5), p4), 1))
        n3 = self.elan_up2(torch.cat((self.up(n4), p3), 1))
        o4 = self.elan_down1(torch.cat((self.down1(n3), n4), 1))
        o5 = self.elan_down2(torch.cat((self.down2(o4), p5), 1))
        return n3, o4, o5


class DFL(nn.Module):
    """Distribution focal loss decoding: the expected distance over ``reg_max`` bins."""

    def __init__(self, reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.reg_max = reg_max
        # Not in upstream checkpoints (non-persistent); rebuilt at construction.
        self.register_buffer("project", torch.arange(reg_max, dtype=torch.float32).view(1, 1, reg_max, 1),
                             persistent=False)

    def forward(self, logits: Tensor) -> Tensor:
        return dfl_expectation(logits, self.reg_max)


class DetectHead(nn.Module):
    """Decoupled anchor-free head: a box-distribution branch (``cv2``, grouped convs) and a class
    branch (``cv3``) per level."""

    def __init__(self, nc: int, channels: tuple[int, ...], reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        self.no = 4 * reg_max + nc
        c_box = max(16, channels[0] // 4, 4 * reg_max)
        c_cls = max(channels[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, c_box, 3), Conv(c_box, c_box, 3, g=4), nn.Conv2d(c_box, 4 * reg_max, 1, groups=4))
            for c in channels)
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(c, c_cls, 3), Conv(c_cls, c_cls, 3), nn.Conv2d(c_cls, nc, 1))
            for c in channels)
        self.dfl = DFL(reg_max)
        self.register_buffer("stride", torch.tensor(STRIDES, dtype=torch.float32), persistent=False)
        self.anchors = AnchorCache(STRIDES)

    def initialize_biases(self, imgsz: int = 640) -> None:
        """Start box logits flat and class logits at a low prior (about 5 objects per image)."""
        for box, cls, s in zip(self.cv2, self.cv3, STRIDES):
            nn.init.constant_(box[-1].bias, 1.0)  # type: ignore[index]  # an nn.Sequential
            nn.init.constant_(cls[-1].bias, math.log(5 / self.nc / (imgsz / s) ** 2))  # type: ignore[index]

    def raw_maps(self, feats: tuple[Tensor, ...]) -> list[Tensor]:
        """Per level ``[B, 4*reg_max + nc, H, W]``: box-distribution logits then class logits."""
        return [torch.cat((box(f), cls(f)), 1) for f, box, cls in zip(feats, self.cv2, self.cv3)]

    def decode(self, raw: list[Tensor]) -> Tensor:
        """Raw maps -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then sigmoid class scores."""
        b = raw[0].shape[0]
        flat = torch.cat([r.view(b, self.no, -1) for r in raw], 2)
        box_logits, cls_logits = flat.split((4 * self.reg_max, self.nc), 1)
        anchors, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
        boxes = distances_to_boxes(self.dfl(box_logits), anchors.t().unsqueeze(0), dim=1) * strides.t()
        return torch.cat((boxes, cls_logits.sigmoid()), 1)

    def forward(self, feats: tuple[Tensor, ...]) -> tuple[Tensor, list[Tensor]]:
        raw = self.raw_maps(feats)
        return self.decode(raw), raw


class Yolo9Net(nn.Module):
    """YOLOv9 detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then class scores after
        sigmoid; anchors row-major per level, levels in stride order 8, 16, 32.
        ``raw_outputs`` list of ``[B, 4*16 + nc, H/s, W/s]``: box-distribution logits (l, t, r, b
        x 16 bins) then class logits; what the loss reads.
        ``x8``/``x16``/``x32`` ``{"features": Tensor}``: the neck outputs fed to the head.
    """

    def __init__(self, size: str = "t", nc: int = 80) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"unknown YOLOv9 size {size!r}; known sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = Backbone(arch)
        self.neck = Neck(arch)
        self.head = DetectHead(nc, arch.head_channels)
        self.head.initialize_biases()

    def raw_outputs(self, x: Tensor) -> list[Tensor]:
        """Only what the loss reads (the training graph seam): the three raw head maps."""
        return self.head.raw_maps(self.neck(*self.backbone(x)))

    def forward(self, x: Tensor) -> dict[str, object]:
        f8, f16, f32 = self.neck(*self.backbone(x))
        predictions, raw = self.head((f8, f16, f32))
        return {"predictions": predictions, "raw_outputs": raw,
                "x8": {"features": f8}, "x16": {"features": f16}, "x32": {"features": f32}}
