"""HGNetv2 (PP-HGNetV2), the backbone of RT-DETR l and x.

Each stage is a stack of "HG blocks": a chain of convolutions whose every intermediate output is
concatenated and squeezed back by two 1x1 convolutions (dense aggregation at the cost of one
concat). Stages 3 and 4 use "light" convolutions (1x1 then depthwise). Returns stages 2-4
(strides 8, 16, 32). Module names are upstream's checkpoint keys (``stem.stem2a.conv.1``, the
``1`` being the convolution after an asymmetric zero pad).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..fuse import fold_batchnorm
from .norms import batch_norm


@dataclass(frozen=True)
class _Stage:
    c_in: int
    mid: int
    c_out: int
    blocks: int
    downsample: bool
    light: bool
    kernel: int
    layers: int = 6


# Stem channels (in, mid, out) and the four stages of each arch (the official configs' numbers).
_ARCHS: dict[str, tuple[tuple[int, int, int], tuple[_Stage, ...]]] = {
    "L": ((3, 32, 48), (_Stage(48, 48, 128, 1, False, False, 3), _Stage(128, 96, 512, 1, True, False, 3),
                        _Stage(512, 192, 1024, 3, True, True, 5), _Stage(1024, 384, 2048, 1, True, True, 5))),
    "X": ((3, 32, 64), (_Stage(64, 64, 128, 1, False, False, 3), _Stage(128, 128, 512, 2, True, False, 3),
                        _Stage(512, 256, 1024, 5, True, True, 5), _Stage(1024, 512, 2048, 2, True, True, 5))),
}
_RETURNED = (1, 2, 3)


class ConvBNAct(nn.Module):
    """conv -> norm (``bn``) -> optional ReLU. ``pad_after=True``: pad right and bottom by one,
    then an unpadded convolution (the stem's 2x2 kernels keep the spatial size that way)."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1, *, groups: int = 1, act: bool = True,
                 pad_after: bool = False, frozen: bool = False) -> None:
        super().__init__()
        if pad_after:
            self.conv: nn.Module = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)),
                                                 nn.Conv2d(c_in, c_out, k, s, groups=groups, bias=False))
        else:
            self.conv = nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2, groups=groups, bias=False)
        self.bn = batch_norm(c_out, frozen)
        self.act = nn.ReLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))

    def fuse_for_inference(self) -> bool:
        """Fold ``bn`` into the convolution (after the pad, where there is one)."""
        if isinstance(self.bn, nn.Identity):
            return False
        if isinstance(self.conv, nn.Sequential):
            self.conv[1] = fold_batchnorm(self.conv[1], self.bn)  # type: ignore[arg-type]
        else:
            self.conv = fold_batchnorm(self.conv, self.bn)  # type: ignore[arg-type]
        self.bn = nn.Identity()
        return True


class LightConvBNAct(nn.Module):
    """1x1 projection (no activation) then a depthwise ``k x k`` with ReLU."""

    def __init__(self, c_in: int, c_out: int, k: int, frozen: bool) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(c_in, c_out, 1, act=False, frozen=frozen)
        self.conv2 = ConvBNAct(c_out, c_out, k, groups=c_out, frozen=frozen)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.conv1(x))


class StemBlock(nn.Module):
    """Stride 4 stem: a strided 3x3, then a 2x2-conv branch beside a 2x2 max-pool, concatenated."""

    def __init__(self, c_in: int, mid: int, c_out: int, frozen: bool) -> None:
        super().__init__()
        self.stem1 = ConvBNAct(c_in, mid, 3, 2, frozen=frozen)
        self.stem2a = ConvBNAct(mid, mid // 2, 2, 1, pad_after=True, frozen=frozen)
        self.stem2b = ConvBNAct(mid // 2, mid, 2, 1, pad_after=True, frozen=frozen)
        self.stem3 = ConvBNAct(mid * 2, mid, 3, 2, frozen=frozen)
        self.stem4 = ConvBNAct(mid, c_out, 1, 1, frozen=frozen)
        self.pool = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.MaxPool2d(2, 1, ceil_mode=True))

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem1(x)
        branch = self.stem2b(self.stem2a(x))
        return self.stem4(self.stem3(torch.cat((self.pool(x), branch), 1)))


class HGBlock(nn.Module):
    """``layers`` chained convolutions, all outputs (and the input) concatenated, squeezed to
    ``c_out / 2`` and excited back to ``c_out``; a residual when the width is unchanged."""

    def __init__(self, c_in: int, mid: int, c_out: int, stage: _Stage, residual: bool, frozen: bool) -> None:
        super().__init__()
        self.residual = residual
        self.layers = nn.ModuleList(
            LightConvBNAct(c_in if i == 0 else mid, mid, stage.kernel, frozen) if stage.light
            else ConvBNAct(c_in if i == 0 else mid, mid, stage.kernel, frozen=frozen)
            for i in range(stage.layers))
        total = c_in + stage.layers * mid
        self.aggregation_squeeze_conv = ConvBNAct(total, c_out // 2, 1, frozen=frozen)
        self.aggregation_excitation_conv = ConvBNAct(c_out // 2, c_out, 1, frozen=frozen)

    def forward(self, x: Tensor) -> Tensor:
        outputs = [x]
        y = x
        for layer in self.layers:
            y = layer(y)
            outputs.append(y)
        y = self.aggregation_excitation_conv(self.aggregation_squeeze_conv(torch.cat(outputs, 1)))
        return y + x if self.residual else y


class HGStage(nn.Module):
    """An optional depthwise strided 3x3 (no activation), then the stage's HG blocks."""

    def __init__(self, stage: _Stage, frozen: bool) -> None:
        super().__init__()
        self.downsample = (ConvBNAct(stage.c_in, stage.c_in, 3, 2, groups=stage.c_in, act=False, frozen=frozen)
                           if stage.downsample else None)
        self.blocks = nn.Sequential(*(
            HGBlock(stage.c_in if i == 0 else stage.c_out, stage.mid, stage.c_out, stage, i > 0, frozen)
            for i in range(stage.blocks)))

    def forward(self, x: Tensor) -> Tensor:
        if self.downsample is not None:
            x = self.downsample(x)
        return self.blocks(x)


class HGNetv2(nn.Module):
    """HGNetv2 ``arch`` ("L" or "X") -> feature maps at strides 8, 16, 32."""

    def __init__(self, arch: str, frozen_norm: bool) -> None:
        super().__init__()
        if arch not in _ARCHS:
            raise ValueError(f"HGNetv2 arch {arch!r} is not one of {sorted(_ARCHS)}")
        stem, stages = _ARCHS[arch]
        self.stem = StemBlock(*stem, frozen=frozen_norm)
        self.stages = nn.ModuleList(HGStage(stage, frozen_norm) for stage in stages)
        self.out_channels = [stages[i].c_out for i in _RETURNED]
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in _RETURNED:
                outs.append(x)
        return outs
