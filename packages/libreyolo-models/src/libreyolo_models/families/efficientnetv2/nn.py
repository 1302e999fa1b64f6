"""EfficientNetV2-B0..B3: the published base network, scaled, on torchvision's EfficientNet blocks.

torchvision ships EfficientNetV2-S/M/L but not the small B-variants; they share its blocks
(Fused-MBConv, MBConv with squeeze-excitation), so only the configuration is written here. The
base network and its scaling are the paper's (EfficientNetV2, Tan & Le 2021) as its reference
code declares them: six stages, width and depth multipliers per variant, channels rounded to
multiples of 8 (to the nearest, with no bump when rounding down; torchvision's own rounding bumps
them, which would give other widths), depths rounded up. The state-dict keys are torchvision's
EfficientNet keys (``features.*``, ``classifier.1.*``).
"""

from __future__ import annotations

import math
from functools import partial

from torch import Tensor, nn
from torchvision.models.efficientnet import EfficientNet, FusedMBConvConfig, MBConvConfig

from ...layers.normalize import InputNormalize

# (block, expand ratio, kernel, stride, in channels, out channels, repeats): MBConv stages carry
# squeeze-excitation at a quarter of their input channels (torchvision's MBConv does).
BASE_STAGES = (
    ("fused", 1, 3, 1, 32, 16, 1),
    ("fused", 4, 3, 2, 16, 32, 2),
    ("fused", 4, 3, 2, 32, 48, 2),
    ("mb", 4, 3, 2, 48, 96, 3),
    ("mb", 6, 3, 1, 96, 112, 5),
    ("mb", 6, 3, 2, 112, 192, 8),
)
HEAD_CHANNELS = 1280

# size -> (width multiplier, depth multiplier, dropout before the classifier).
SCALING = {"b0": (1.0, 1.0, 0.2), "b1": (1.0, 1.1, 0.2), "b2": (1.1, 1.2, 0.3), "b3": (1.2, 1.4, 0.3)}

STOCHASTIC_DEPTH = 0.2
BN_EPS = 1e-3  # the reference implementation's BatchNorm epsilon


def round_channels(channels: int, width: float, divisor: int = 8) -> int:
    """``channels * width`` to the nearest multiple of ``divisor`` (at least ``divisor``)."""
    return max(divisor, int(channels * width + divisor / 2) // divisor * divisor)


def stage_configs(size: str) -> list[FusedMBConvConfig | MBConvConfig]:
    width, depth, _ = SCALING[size]
    stages: list[FusedMBConvConfig | MBConvConfig] = []
    for kind, expand, kernel, stride, cin, cout, repeats in BASE_STAGES:
        args = (expand, kernel, stride, round_channels(cin, width), round_channels(cout, width),
                math.ceil(repeats * depth))
        stages.append(FusedMBConvConfig(*args) if kind == "fused" else MBConvConfig(*args))
    return stages


class EfficientNetV2Net(EfficientNet):
    """RGB ``[B, 3, H, W]`` in [0, 1] -> logits ``[B, nc]``."""

    def __init__(self, size: str, nc: int, mean: tuple[float, float, float],
                 std: tuple[float, float, float]) -> None:
        width, _, dropout = SCALING[size]
        super().__init__(stage_configs(size), dropout, stochastic_depth_prob=STOCHASTIC_DEPTH, num_classes=nc,
                         norm_layer=partial(nn.BatchNorm2d, eps=BN_EPS),
                         last_channel=round_channels(HEAD_CHANNELS, width))
        self.normalize = InputNormalize(mean, std)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(self.normalize(x))
