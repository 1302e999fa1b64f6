"""HGNetv2 as D-FINE, DEIM, RT-DETRv4 and DEIMv2 (atto to n) lay it out: arches B0-B6 plus
DEIMv2's three-stage Atto, Femto and Pico.

Each stage is a stack of "HG blocks": a chain of convolutions whose every intermediate output is
concatenated and squeezed back by two 1x1 convolutions. The small arches (B0-B3 in these
families) add a learnable affine (``lab``: one scale and one bias for the whole map) after each
activation, which helps a narrow network keep its signal. Module names are upstream's checkpoint
keys (``stem.stem2a.conv``, ``stages.<i>.blocks.<j>.aggregation.<k>``, ``lab.scale``); RT-DETR's
own HGNetv2 (l and x) names them differently and lives in its family folder.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .mlp import activation
from .norms import batch_norm


@dataclass(frozen=True)
class HGStage:
    """One stage: widths, HG blocks, whether it halves the map, light (1x1 + depthwise) layers,
    kernel of the chained convolutions, convolutions per block."""

    c_in: int
    mid: int
    c_out: int
    blocks: int
    downsample: bool
    light: bool
    kernel: int
    layers: int


def _stages(*rows: tuple[int, int, int, int, bool, bool, int, int]) -> tuple[HGStage, ...]:
    return tuple(HGStage(*row) for row in rows)


# Stem channels (in, mid, out) and stages of each arch: the official configs' numbers.
ARCHES: dict[str, tuple[tuple[int, int, int], tuple[HGStage, ...]]] = {
    "Atto": ((3, 16, 16), _stages((16, 16, 64, 1, False, False, 3, 3), (64, 32, 256, 1, True, False, 3, 3),
                                  (256, 64, 256, 1, True, True, 3, 3))),
    "Femto": ((3, 16, 16), _stages((16, 16, 64, 1, False, False, 3, 3), (64, 32, 256, 1, True, False, 3, 3),
                                   (256, 64, 512, 1, True, True, 5, 3))),
    "Pico": ((3, 16, 16), _stages((16, 16, 64, 1, False, False, 3, 3), (64, 32, 256, 1, True, False, 3, 3),
                                  (256, 64, 512, 2, True, True, 5, 3))),
    "B0": ((3, 16, 16), _stages((16, 16, 64, 1, False, False, 3, 3), (64, 32, 256, 1, True, False, 3, 3),
                                (256, 64, 512, 2, True, True, 5, 3), (512, 128, 1024, 1, True, True, 5, 3))),
    "B1": ((3, 24, 32), _stages((32, 32, 64, 1, False, False, 3, 3), (64, 48, 256, 1, True, False, 3, 3),
                                (256, 96, 512, 2, True, True, 5, 3), (512, 192, 1024, 1, True, True, 5, 3))),
    "B2": ((3, 24, 32), _stages((32, 32, 96, 1, False, False, 3, 4), (96, 64, 384, 1, True, False, 3, 4),
                                (384, 128, 768, 3, True, True, 5, 4), (768, 256, 1536, 1, True, True, 5, 4))),
    "B3": ((3, 24, 32), _stages((32, 32, 128, 1, False, False, 3, 5), (128, 64, 512, 1, True, False, 3, 5),
                                (512, 128, 1024, 3, True, True, 5, 5), (1024, 256, 2048, 1, True, True, 5, 5))),
    "B4": ((3, 32, 48), _stages((48, 48, 128, 1, False, False, 3, 6), (128, 96, 512, 1, True, False, 3, 6),
                                (512, 192, 1024, 3, True, True, 5, 6), (1024, 384, 2048, 1, True, True, 5, 6))),
    "B5": ((3, 32, 64), _stages((64, 64, 128, 1, False, False, 3, 6), (128, 128, 512, 2, True, False, 3, 6),
                                (512, 256, 1024, 5, True, True, 5, 6), (1024, 512, 2048, 2, True, True, 5, 6))),
    "B6": ((3, 48, 96), _stages((96, 96, 192, 2, False, False, 3, 6), (192, 192, 512, 3, True, False, 3, 6),
                                (512, 384, 1024, 6, True, True, 5, 6), (1024, 768, 2048, 3, True, True, 5, 6))),
}


class LearnableAffine(nn.Module):
    """``scale * x + bias`` with one learned scale and bias for the whole map (upstream's ``lab``)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x + self.bias


@dataclass(frozen=True)
class Unit:
    """What every convolution unit of one backbone shares: the activation, the learnable affine
    after it, and frozen norms."""

    act: str = "relu"
    lab: bool = False
    frozen: bool = False


class ConvBNAct(nn.Module):
    """conv -> ``bn`` -> activation -> learnable affine (``lab``: only after an activation)."""

    def __init__(self, c_in: int, c_out: int, k: int, s: int = 1, *, unit: Unit, groups: int = 1,
                 act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2, groups=groups, bias=False)
        self.bn = batch_norm(c_out, unit.frozen)
        self.act = activation(unit.act) if act else nn.Identity()
        self.lab = LearnableAffine() if act and unit.lab else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.lab(self.act(self.bn(self.conv(x))))


class LightConvBNAct(nn.Module):
    """1x1 projection (no activation) then a depthwise ``k x k`` with activation."""

    def __init__(self, c_in: int, c_out: int, k: int, unit: Unit) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(c_in, c_out, 1, unit=unit, act=False)
        self.conv2 = ConvBNAct(c_out, c_out, k, unit=unit, groups=c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.conv1(x))


class StemBlock(nn.Module):
    """Stride-4 stem: a strided 3x3, then two 2x2 convolutions beside a 2x2 max-pool (both after a
    right/bottom zero pad, so the size is kept), concatenated, a strided 3x3 and a 1x1."""

    def __init__(self, c_in: int, mid: int, c_out: int, unit: Unit) -> None:
        super().__init__()
        self.stem1 = ConvBNAct(c_in, mid, 3, 2, unit=unit)
        self.stem2a = ConvBNAct(mid, mid // 2, 2, 1, unit=unit)
        self.stem2b = ConvBNAct(mid // 2, mid, 2, 1, unit=unit)
        self.stem3 = ConvBNAct(mid * 2, mid, 3, 2, unit=unit)
        self.stem4 = ConvBNAct(mid, c_out, 1, 1, unit=unit)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=1, ceil_mode=True)

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(self.stem1(x), (0, 1, 0, 1))
        branch = self.stem2b(F.pad(self.stem2a(x), (0, 1, 0, 1)))
        return self.stem4(self.stem3(torch.cat((self.pool(x), branch), 1)))


class HGBlock(nn.Module):
    """``layers`` chained convolutions, all outputs (and the input) concatenated, squeezed to
    ``c_out / 2`` and excited back to ``c_out`` (``aggregation``); a residual after the first block."""

    def __init__(self, c_in: int, stage: HGStage, residual: bool, unit: Unit) -> None:
        super().__init__()
        self.residual = residual
        layers: list[nn.Module] = []
        for i in range(stage.layers):
            width = c_in if i == 0 else stage.mid
            layers.append(LightConvBNAct(width, stage.mid, stage.kernel, unit) if stage.light
                          else ConvBNAct(width, stage.mid, stage.kernel, unit=unit))
        self.layers = nn.ModuleList(layers)
        total = c_in + stage.layers * stage.mid
        self.aggregation = nn.Sequential(ConvBNAct(total, stage.c_out // 2, 1, unit=unit),
                                         ConvBNAct(stage.c_out // 2, stage.c_out, 1, unit=unit))

    def forward(self, x: Tensor) -> Tensor:
        outputs = [x]
        y = x
        for layer in self.layers:
            y = layer(y)
            outputs.append(y)
        y = self.aggregation(torch.cat(outputs, 1))
        return y + x if self.residual else y


class HGStageModule(nn.Module):
    """An optional depthwise strided 3x3 (no activation), then the stage's HG blocks."""

    def __init__(self, stage: HGStage, unit: Unit) -> None:
        super().__init__()
        self.downsample: nn.Module = (ConvBNAct(stage.c_in, stage.c_in, 3, 2, unit=unit, groups=stage.c_in, act=False)
                                      if stage.downsample else nn.Identity())
        self.blocks = nn.Sequential(*(HGBlock(stage.c_in if i == 0 else stage.c_out, stage, i > 0, unit)
                                      for i in range(stage.blocks)))

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.downsample(x))


class HGNetv2(nn.Module):
    """HGNetv2 ``arch`` -> the feature maps of stages ``returned`` (stage i has stride 4 * 2**i).

    Args:
        arch: a key of :data:`ARCHES`.
        returned: indices of the stages whose outputs the encoder reads.
        lab: learnable affine after each activation (the small arches).
        frozen_norm: ``FrozenBatchNorm2d`` everywhere (D-FINE/DEIM l and x; statistics in buffers).
        freeze_stem: the stem's parameters do not train (D-FINE and RT-DETRv4, made for a
            pretrained backbone; DEIM and DEIMv2 train everything).
        act: the activation after each convolution.
    """

    def __init__(self, arch: str, returned: tuple[int, ...], *, lab: bool, frozen_norm: bool = False,
                 freeze_stem: bool = False, act: str = "relu") -> None:
        super().__init__()
        if arch not in ARCHES:
            raise ValueError(f"HGNetv2 arch {arch!r} is not one of {sorted(ARCHES)}")
        stem, stages = ARCHES[arch]
        unit = Unit(act=act, lab=lab, frozen=frozen_norm)
        self.returned = tuple(returned)
        self.stem = StemBlock(*stem, unit)
        self.stages = nn.ModuleList(HGStageModule(stage, unit) for stage in stages)
        self.out_channels = [stages[i].c_out for i in self.returned]
        self.out_strides = [4 * 2**i for i in self.returned]
        if freeze_stem:
            self.stem.requires_grad_(False)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.returned:
                outs.append(x)
        return outs
