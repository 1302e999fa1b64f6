"""The PP-OCRv4 mobile text detector: PP-LCNetV3 (x0.75), 1x1 level projections, an RSE-FPN neck
and the DB head's probability branch (the only branch inference uses)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lcnet import BlockSpec, LCNetV3, hard_sigmoid

_S2 = (2, 2)
_S1 = (1, 1)

DET_STAGES: tuple[tuple[BlockSpec, ...], ...] = (
    (BlockSpec(3, 16, 32, _S1),),
    (BlockSpec(3, 32, 48, _S2), BlockSpec(3, 48, 48, _S1)),
    (BlockSpec(3, 48, 96, _S2), BlockSpec(3, 96, 96, _S1)),
    (BlockSpec(3, 96, 192, _S2),) + (BlockSpec(5, 192, 192, _S1),) * 4,
    (BlockSpec(5, 192, 384, _S2, se=True), BlockSpec(5, 384, 384, _S1, se=True),
     BlockSpec(5, 384, 384, _S1), BlockSpec(5, 384, 384, _S1)),
)
DET_LEVELS = (12, 18, 42, 360)  # the backbone's 1x1 projections of strides 4, 8, 16, 32 (upstream's det mode)
NECK_CHANNELS = 96


class ResidualSE(nn.Module):
    """conv (no bias) then ``y + y * se(y)``, the squeeze-excite using Paddle's hard-sigmoid (slope 0.2)."""

    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, 1, kernel // 2, bias=False)
        self.reduce = nn.Conv2d(cout, cout // 4, 1)
        self.expand = nn.Conv2d(cout // 4, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        s = self.expand(F.relu(self.reduce(y.mean((2, 3), keepdim=True))))
        return y + y * hard_sigmoid(s, 0.2)


def _up(x: Tensor, factor: int) -> Tensor:
    return F.interpolate(x, scale_factor=factor, mode="nearest")


class DBDetector(nn.Module):
    """Normalised BGR ``[B, 3, H, W]`` (sides multiples of 32) -> text probability ``[B, 1, H, W]``."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = LCNetV3(16, DET_STAGES)
        widths = [stage[-1].cout for stage in DET_STAGES[1:]]
        self.project = nn.ModuleList(nn.Conv2d(c, p, 1) for c, p in zip(widths, DET_LEVELS))
        self.lateral = nn.ModuleList(ResidualSE(p, NECK_CHANNELS, 1) for p in DET_LEVELS)
        self.smooth = nn.ModuleList(ResidualSE(NECK_CHANNELS, NECK_CHANNELS // 4, 3) for _ in DET_LEVELS)
        q = NECK_CHANNELS // 4
        self.head_conv = nn.Conv2d(NECK_CHANNELS, q, 3, 1, 1, bias=False)
        self.head_bn1 = nn.BatchNorm2d(q)
        self.head_up1 = nn.ConvTranspose2d(q, q, 2, 2)
        self.head_bn2 = nn.BatchNorm2d(q)
        self.head_up2 = nn.ConvTranspose2d(q, 1, 2, 2)

    def forward(self, x: Tensor) -> Tensor:
        feats = [proj(f) for proj, f in zip(self.project, self.backbone(x))]
        # top-down, in upstream's order of evaluation (the converter maps weights in call order)
        lat = [self.lateral[i](feats[i]) for i in (3, 2, 1, 0)][::-1]
        out4 = lat[2] + _up(lat[3], 2)
        out3 = lat[1] + _up(out4, 2)
        out2 = lat[0] + _up(out3, 2)
        p5 = self.smooth[3](lat[3])
        p4 = self.smooth[2](out4)
        p3 = self.smooth[1](out3)
        p2 = self.smooth[0](out2)
        fused = torch.cat([_up(p5, 8), _up(p4, 4), _up(p3, 2), p2], 1)
        y = F.relu(self.head_bn1(self.head_conv(fused)))
        y = F.relu(self.head_bn2(self.head_up1(y)))
        return torch.sigmoid(self.head_up2(y))
