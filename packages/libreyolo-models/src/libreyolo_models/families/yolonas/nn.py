"""The YOLO-NAS detection network (QARepVGG backbone, PAN neck with C2, DFL heads): tensors in,
tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is what a CUDA graph
captures. It returns the same dict in train and eval mode; the caller decides what comes next
(loss on ``raw_outputs``, post-processing on ``predictions``).

State-dict keys (``backbone.``, ``neck.``, ``heads.``) match upstream LibreYOLO's YOLO-NAS (itself
SuperGradients' layout) with no remapping; ``tests/test_yolonas_upstream_compat.py`` pins every
key, shape and dtype for s, m and l. The QARepVGG blocks run their branches (upstream's eval
forward too); ``LibreYOLO.fuse`` folds them into one convolution each on the inference copy.

Input convention: upstream feeds YOLO-NAS RGB in [0, 1], the zoo's own convention, so
``upstream_outputs`` and ``raw_outputs`` take the same tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, dfl_expectation, distances_to_boxes, level_shapes
from ...layers.repvgg import QARepVGGBlock
from .blocks import SPP, DownStage, SeqConvReLU, Stage, UpStage

STRIDES = (8, 16, 32)
BINS = 17  # DFL bins per box side (upstream's reg_max = 16: distances 0..16 in grid units)
PRIOR_PROB = 0.01  # initial class probability (upstream's bias initialisation)
ATSS_CELL = 5.0  # upstream's raw outputs carry ATSS anchor boxes this many strides wide


@dataclass(frozen=True)
class YoloNasArch:
    """One size as data (upstream's per-size configuration, already resolved).

    Attributes:
        stem: stem channels. stages: output channels of backbone stages 1-4; blocks: their
            bottleneck counts; hidden: their CSP hidden channels; concat: whether each CSP layer
            concatenates every bottleneck's output (m, l).
        neck: output channels of neck stages 1-4 (two up, two down); up_blocks/up_hidden and
            down_blocks/down_hidden: their bottleneck counts and CSP hidden channels.
        head_width: multiplier of the three heads' inner widths (128, 256, 512 at 1.0).
    """

    stem: int
    stages: tuple[int, int, int, int]
    blocks: tuple[int, int, int, int]
    hidden: tuple[int, int, int, int]
    concat: tuple[bool, bool, bool, bool]
    neck: tuple[int, int, int, int]
    up_blocks: tuple[int, int]
    up_hidden: tuple[int, int]
    down_blocks: tuple[int, int]
    down_hidden: tuple[int, int]
    head_width: float

    @property
    def head_in(self) -> tuple[int, int, int]:
        """Channels of the neck outputs the heads read (strides 8, 16, 32)."""
        return self.neck[1], self.neck[2], self.neck[3]


_WIDE = (96, 192, 384, 768)
_NECK = (192, 96, 192, 384)
# Size n exists upstream for the pose task only (YOLO-NAS-Pose n); detect has s, m, l.
ARCHS: dict[str, YoloNasArch] = {
    "n": YoloNasArch(32, (64, 128, 256, 512), (2, 3, 4, 2), (32, 48, 64, 128), (False,) * 4, (128, 64, 128, 256),
                     (2, 2), (48, 32), (2, 2), (48, 48), 0.33),
    "s": YoloNasArch(48, _WIDE, (2, 3, 5, 2), (32, 64, 96, 192), (False,) * 4, _NECK,
                     (2, 2), (64, 48), (2, 2), (64, 64), 0.5),
    "m": YoloNasArch(48, _WIDE, (2, 3, 5, 2), (64, 128, 256, 384), (True, True, True, False), _NECK,
                     (2, 3), (192, 64), (2, 3), (192, 256), 0.75),
    "l": YoloNasArch(48, _WIDE, (2, 3, 5, 2), (96, 128, 256, 512), (True,) * 4, _NECK,
                     (4, 4), (128, 128), (4, 4), (128, 256), 1.0),
}
DETECT_SIZES = ("s", "m", "l")


def head_width(channels: int, multiplier: float) -> int:
    """A head's inner width: ``channels x multiplier``, truncated, then rounded up to a multiple of 8."""
    return math.ceil(int(channels * multiplier) / 8) * 8


class Stem(nn.Module):
    """A stride-2 QARepVGG block on the image (upstream nests it as ``stem.conv``)."""

    def __init__(self, c_out: int) -> None:
        super().__init__()
        self.conv = QARepVGGBlock(3, c_out, 2, residual=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class Backbone(nn.Module):
    """Stem, four stages (strides 4, 8, 16, 32) and SPP on the last; returns all four maps."""

    def __init__(self, arch: YoloNasArch) -> None:
        super().__init__()
        self.stem = Stem(arch.stem)
        c_in, stages = arch.stem, []
        for c_out, n, hidden, concat in zip(arch.stages, arch.blocks, arch.hidden, arch.concat):
            stages.append(Stage(c_in, c_out, n, hidden, concat))
            c_in = c_out
        self.stage1, self.stage2, self.stage3, self.stage4 = stages  # registered in this order (checkpoint keys)
        self.context_module = SPP(arch.stages[3], arch.stages[3])

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        c2 = self.stage1(self.stem(x))
        c3 = self.stage2(c2)
        c4 = self.stage3(c3)
        return c2, c3, c4, self.context_module(self.stage4(c4))


class Neck(nn.Module):
    """PAN with C2: two up stages (each also reading the level below, strided down), two down
    stages; returns the stride 8, 16 and 32 maps."""

    def __init__(self, arch: YoloNasArch) -> None:
        super().__init__()
        c2, c3, c4, c5 = arch.stages
        n1, n2, n3, n4 = arch.neck
        self.neck1 = UpStage(c5, c4, c3, n1, arch.up_blocks[0], arch.up_hidden[0])
        self.neck2 = UpStage(n1, c3, c2, n2, arch.up_blocks[1], arch.up_hidden[1])
        self.neck3 = DownStage(n2, n2, n3, arch.down_blocks[0], arch.down_hidden[0])
        self.neck4 = DownStage(n3, n1, n4, arch.down_blocks[1], arch.down_hidden[1])

    def forward(self, feats: tuple[Tensor, Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        c2, c3, c4, c5 = feats
        inter1, x = self.neck1(c5, c4, c3)
        inter2, p3 = self.neck2(x, c3, c2)
        p4 = self.neck3(p3, inter2)
        return p3, p4, self.neck4(p4, inter1)


class DFLHead(nn.Module):
    """One level's head: a 1x1 stem, then a class branch and a box branch (one 3x3 conv each)."""

    def __init__(self, c_in: int, width: int, nc: int) -> None:
        super().__init__()
        self.stem = SeqConvReLU(c_in, width, 1)
        self.cls_convs = nn.Sequential(SeqConvReLU(width, width, 3))
        self.reg_convs = nn.Sequential(SeqConvReLU(width, width, 3))
        self.cls_pred = nn.Conv2d(width, nc, 1)
        self.reg_pred = nn.Conv2d(width, 4 * BINS, 1)
        if self.cls_pred.bias is not None:  # built with a bias; the check is for the type checker
            nn.init.constant_(self.cls_pred.bias, -math.log((1 - PRIOR_PROB) / PRIOR_PROB))

    def forward(self, x: Tensor) -> Tensor:
        """``[B, 4 * BINS + nc, H, W]``: box-side logits (side-major l, t, r, b), then class logits."""
        x = self.stem(x)
        return torch.cat((self.reg_pred(self.reg_convs(x)), self.cls_pred(self.cls_convs(x))), 1)


class DetectHeads(nn.Module):
    """The three levels' heads and the decoding every consumer shares (keys ``head1``..``head3``)."""

    def __init__(self, nc: int, in_channels: tuple[int, int, int], multiplier: float) -> None:
        super().__init__()
        self.nc = nc
        widths = [head_width(c, multiplier) for c in (128, 256, 512)]
        self.head1, self.head2, self.head3 = (DFLHead(c, w, nc) for c, w in zip(in_channels, widths))
        self.anchors = AnchorCache(STRIDES)  # cell centres

    def raw_maps(self, feats: tuple[Tensor, Tensor, Tensor]) -> list[Tensor]:
        return [self.head1(feats[0]), self.head2(feats[1]), self.head3(feats[2])]

    def decode(self, raw: list[Tensor]) -> Tensor:
        """Raw maps -> ``[B, 4 + nc, A]``: xyxy boxes in input pixels (cell centre -/+ the DFL
        expectation, times the stride), then sigmoid class scores."""
        flat = torch.cat([r.flatten(2) for r in raw], 2)  # [B, 4 * BINS + nc, A]
        points, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
        dist = dfl_expectation(flat[:, :4 * BINS], BINS)  # [B, 4, A] grid units
        boxes = distances_to_boxes(dist, points.t().unsqueeze(0), dim=1) * strides.t().unsqueeze(0)
        return torch.cat((boxes, flat[:, 4 * BINS:].sigmoid()), 1)

    def upstream(self, raw: list[Tensor]) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, ...]]:
        """Upstream's eval output: ``((boxes [B, A, 4], scores [B, A, nc]), (class logits [B, A, nc],
        box logits [B, A, 4 * BINS], ATSS anchor boxes [A, 4], cell centres [A, 2], per-level
        anchor counts, strides [A, 1]))``, pixels; the anchor counts are ints in a tuple."""
        decoded = self.decode(raw).transpose(1, 2)
        flat = torch.cat([r.flatten(2) for r in raw], 2).transpose(1, 2)
        points, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
        centres = points * strides
        half = ATSS_CELL / 2 * strides
        counts = tuple(r.shape[2] * r.shape[3] for r in raw)
        return ((decoded[..., :4], decoded[..., 4:]),
                (flat[..., 4 * BINS:], flat[..., :4 * BINS], torch.cat((centres - half, centres + half), 1), centres,
                 counts, strides))  # type: ignore[return-value]  # counts: upstream's non-tensor leaf


class YoloNasNet(nn.Module):
    """YOLO-NAS detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then sigmoid class scores;
        anchors row-major per level, levels in stride order 8, 16, 32.
        ``raw_outputs`` list of ``[B, 4 * 17 + nc, H/s, W/s]``: box-side logits (side-major, 17
        bins each), then class logits; what the loss reads.
    """

    def __init__(self, size: str = "s", nc: int = 80) -> None:
        super().__init__()
        if size not in DETECT_SIZES:
            raise ValueError(f"unknown YOLO-NAS detect size {size!r}; known sizes: {', '.join(DETECT_SIZES)}")
        arch = ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = Backbone(arch)
        self.neck = Neck(arch)
        self.heads = DetectHeads(nc, arch.head_in, arch.head_width)

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """Only what the loss reads (the training graph seam): the three raw head maps."""
        return self.heads.raw_maps(self.neck(self.backbone(images)))

    def upstream_outputs(self, x: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, ...]]:
        """Upstream's eval-mode forward (same input convention): see ``DetectHeads.upstream``."""
        return self.heads.upstream(self.raw_outputs(x))

    def forward(self, images: Tensor) -> dict[str, Tensor | list[Tensor]]:
        raw = self.raw_outputs(images)
        return {"predictions": self.heads.decode(raw), "raw_outputs": raw}
