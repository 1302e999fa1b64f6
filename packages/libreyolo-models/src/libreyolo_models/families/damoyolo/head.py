"""DAMO-YOLO's ZeroHead (a GFL head without shared conv stacks): per level one class conv and one
box-distribution conv on the neck feature, a learnable scale on the box logits, and the integral
over ``reg_max + 1`` bins that turns a distribution into a distance.

Keys: ``integral.project`` (a stored buffer, the bin values 0..reg_max), ``gfl_cls``, ``gfl_reg``,
``scales`` (one 0-d parameter per level). The empty ``cls_convs``/``reg_convs`` of upstream (no
stacked convs in any published size) hold no keys and are left out.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, level_shapes

STRIDES = (8, 16, 32)
PRIOR_PROB = 0.01  # GFL's class prior at initialisation


class Scale(nn.Module):
    """Multiply by one learnable scalar (``scale``, a 0-d parameter)."""

    def __init__(self, value: float = 1.0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(value, dtype=torch.float32))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale


class Integral(nn.Module):
    """Expected value of a softmax distribution over bins ``project`` (stored, so a checkpoint's
    values are the ones used, as upstream's forward does)."""

    def __init__(self, reg_max: int) -> None:
        super().__init__()
        self.reg_max = reg_max
        self.project: Tensor
        self.register_buffer("project", torch.linspace(0, reg_max, reg_max + 1))

    def forward(self, logits: Tensor) -> Tensor:
        """``[B, A, 4, reg_max + 1]`` logits -> ``[B, A, 4]`` distances in bins."""
        return logits.softmax(-1) @ self.project.to(logits.dtype)


class ZeroHead(nn.Module):
    """Per level ``gfl_cls`` (nc class logits) and ``gfl_reg`` (4 x (reg_max + 1) distance logits)."""

    def __init__(self, nc: int, channels: tuple[int, int, int], reg_max: int, kernel: int) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        self.integral = Integral(reg_max)
        self.gfl_cls = nn.ModuleList(nn.Conv2d(c, nc, kernel, padding=kernel // 2) for c in channels)
        self.gfl_reg = nn.ModuleList(nn.Conv2d(c, 4 * (reg_max + 1), kernel, padding=kernel // 2) for c in channels)
        self.scales = nn.ModuleList(Scale(1.0) for _ in channels)
        self.anchors = AnchorCache(STRIDES, offset=0.0)  # priors at cell corners

    def initialize_weights(self) -> None:
        """GFL's initialisation: small normal weights, class biases at a 1 % prior (so the focal
        loss starts near its background value), box biases at 0."""
        for convs, bias in ((self.gfl_cls, -math.log((1 - PRIOR_PROB) / PRIOR_PROB)), (self.gfl_reg, 0.0)):
            for conv in convs:
                assert isinstance(conv, nn.Conv2d) and conv.bias is not None  # built above, with biases
                nn.init.normal_(conv.weight, std=0.01)
                nn.init.constant_(conv.bias, bias)

    def raw_maps(self, feats: tuple[Tensor, ...]) -> list[Tensor]:
        """Per level ``[B, nc + 4 (reg_max + 1), H, W]``: class logits, then the scaled box logits."""
        return [torch.cat((cls(f), scale(reg(f))), 1)
                for f, cls, reg, scale in zip(feats, self.gfl_cls, self.gfl_reg, self.scales)]

    def decode(self, raw: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Raw maps -> (class scores after sigmoid ``[B, A, nc]``, xyxy boxes in pixels ``[B, A, 4]``).

        Boxes from priors at cell corners (``x * stride``, offset 0), distances = integral x stride;
        computed in float32 whatever the maps' dtype (upstream casts the box branch to float).
        """
        b = raw[0].shape[0]
        flat = torch.cat([r.flatten(2) for r in raw], 2).transpose(1, 2)  # [B, A, C]
        cls_logits, box_logits = flat.split((self.nc, 4 * (self.reg_max + 1)), 2)
        priors, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=torch.float32)
        dist = self.integral(box_logits.float().reshape(b, -1, 4, self.reg_max + 1)) * strides
        corner = priors * strides
        boxes = torch.cat((corner - dist[..., :2], corner + dist[..., 2:]), -1)
        return cls_logits.sigmoid(), boxes
