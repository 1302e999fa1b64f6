"""YOLOv9's decoupled anchor-free detect head (box distributions decoded by DFL), shared by YOLOv9
and YOLOv9-E2E, whose head is this one plus a second, one-to-one pair of branches.

Attribute names (``cv2`` box branch, ``cv3`` class branch, ``dfl``) are checkpoint keys of
upstream LibreYOLO weights. ``dfl.project`` and ``stride`` are rebuilt at construction and not
saved (upstream's files do not hold them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from .anchors import AnchorCache, dfl_expectation, distances_to_boxes, level_shapes
from .conv import Conv

STRIDES = (8, 16, 32)
REG_MAX = 16

# Keys older upstream writers used; mapped on load so their files still load unchanged.
_LEGACY_PREFIXES = {"detect.": "head."}
_LEGACY_DROPPED = {"head.dfl.conv.weight"}


def remap_legacy_head_keys(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename a ``detect.`` prefix to ``head.`` and drop the legacy fixed DFL convolution."""
    fixed: dict[str, Tensor] = {}
    for key, value in state.items():
        for old, new in _LEGACY_PREFIXES.items():
            if key.startswith(old):
                key = new + key[len(old):]
        if key not in _LEGACY_DROPPED:
            fixed[key] = value
    return fixed


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


def box_branches(channels: tuple[int, ...], c_box: int, reg_max: int) -> nn.ModuleList:
    """Per level: 3x3 conv, grouped 3x3 conv, 1x1 to ``4 * reg_max`` distance logits (4 groups)."""
    return nn.ModuleList(
        nn.Sequential(Conv(c, c_box, 3), Conv(c_box, c_box, 3, g=4), nn.Conv2d(c_box, 4 * reg_max, 1, groups=4))
        for c in channels)


def class_branches(channels: tuple[int, ...], c_cls: int, nc: int) -> nn.ModuleList:
    """Per level: two 3x3 convs, then a 1x1 conv to ``nc`` class logits."""
    return nn.ModuleList(
        nn.Sequential(Conv(c, c_cls, 3), Conv(c_cls, c_cls, 3), nn.Conv2d(c_cls, nc, 1)) for c in channels)


def initialize_branch_biases(box: nn.ModuleList, cls: nn.ModuleList, nc: int, imgsz: int = 640) -> None:
    """Start box logits flat and class logits at a low prior (about 5 objects per image)."""
    for box_level, cls_level, s in zip(box, cls, STRIDES):
        nn.init.constant_(box_level[-1].bias, 1.0)  # type: ignore[index]  # an nn.Sequential
        nn.init.constant_(cls_level[-1].bias, math.log(5 / nc / (imgsz / s) ** 2))  # type: ignore[index]


class DetectHead(nn.Module):
    """Decoupled anchor-free head: a box-distribution branch (``cv2``, grouped convs) and a class
    branch (``cv3``) per level."""

    def __init__(self, nc: int, channels: tuple[int, ...], reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        self.no = 4 * reg_max + nc
        self.c_box = max(16, channels[0] // 4, 4 * reg_max)
        self.c_cls = max(channels[0], min(nc, 100))
        self.cv2 = box_branches(channels, self.c_box, reg_max)
        self.cv3 = class_branches(channels, self.c_cls, nc)
        self.dfl = DFL(reg_max)
        self.register_buffer("stride", torch.tensor(STRIDES, dtype=torch.float32), persistent=False)
        self.anchors = AnchorCache(STRIDES)

    def initialize_biases(self, imgsz: int = 640) -> None:
        """Start box logits flat and class logits at a low prior (about 5 objects per image)."""
        initialize_branch_biases(self.cv2, self.cv3, self.nc, imgsz)

    def raw_maps(self, feats: tuple[Tensor, ...]) -> list[Tensor]:
        """Per level ``[B, 4*reg_max + nc, H, W]``: box-distribution logits then class logits."""
        return branch_maps(feats, self.cv2, self.cv3)

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


def branch_maps(feats: tuple[Tensor, ...], box: nn.ModuleList, cls: nn.ModuleList) -> list[Tensor]:
    """Per level, the box branch's and the class branch's outputs concatenated on channels."""
    return [torch.cat((b(f), c(f)), 1) for f, b, c in zip(feats, box, cls)]
