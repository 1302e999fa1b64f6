"""DAMO-YOLO's three TinyNAS backbones, as upstream builds them from the searched structures:

- ``TinyNASRes`` (t, s): a Focus stem and five stages of residual blocks (1x1 or 3x3 conv, then a
  RepVGG 3x3), SPP after the last stage's first block; outputs of stages 2, 4 and 5.
- ``TinyNASCSP`` (m, l): the same blocks inside cross-stage-partial wrappers (a stride-2 downsampler,
  a shortcut half and a fuse), stages 3 and 4 sharing one wrapper; outputs of wrappers 2, 3, 4.
- ``TinyNASMob`` (nano ns/nm/nl): a stride-2 conv stem and five stages of mobile inverted-residual
  blocks; outputs of stages 2, 4 and 5.

Key names (``block_list``, ``csp_stage``, ``convstem``, ``downsampler``, ``conv_start``, ...) are
upstream's checkpoint keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .blocks import ConvKXBN, ConvKXBNAct, Focus, MobileBlock, RepConv, SPPBottleneck, activation


@dataclass(frozen=True)
class Stage:
    """One searched stage: ``blocks`` residual blocks ``c_in -> c_out`` (stride on the first) with
    a bottleneck of ``btn`` channels; ``wide_first`` is the "KXKX" block type (a 3x3 first conv)."""

    c_in: int
    c_out: int
    btn: int
    blocks: int
    stride: int
    wide_first: bool = False


class ResConvBlock(nn.Module):
    """``act(conv2(act(conv1(x))) + x)`` (no residual on stride 2); ``conv2`` is a RepVGG 3x3."""

    def __init__(self, c_in: int, c_out: int, btn: int, stride: int, *, act: str, wide_first: bool) -> None:
        super().__init__()
        self.stride = stride
        self.conv1 = ConvKXBN(c_in, btn, 3 if wide_first else 1, 1)
        self.conv2 = RepConv(btn, c_out, stride, act=None)
        self.activation_function = activation(act)
        self.residual_proj = ConvKXBN(c_in, c_out, 1, 1) if c_in != c_out and stride != 2 else None

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.residual_proj is None else self.residual_proj(x)
        y = self.conv2(self.activation_function(self.conv1(x)))
        return self.activation_function(y if self.stride == 2 else y + shortcut)


class ResStage(nn.Module):
    """A stage of ``ResConvBlock``s, SPP after the first block when ``with_spp``."""

    def __init__(self, stage: Stage, *, act: str, with_spp: bool) -> None:
        super().__init__()
        self.block_list = nn.ModuleList()
        for i in range(stage.blocks):
            c_in, stride = (stage.c_in, stage.stride) if i == 0 else (stage.c_out, 1)
            self.block_list.append(ResConvBlock(c_in, stage.c_out, stage.btn, stride, act=act,
                                                wide_first=stage.wide_first))
            if i == 0 and with_spp:
                self.block_list.append(SPPBottleneck(stage.c_out, stage.c_out))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.block_list:
            x = block(x)
        return x


class _Outputs(nn.Module):
    """Runs ``stages`` in order and returns the outputs of ``out_indices`` (strides 8, 16, 32)."""

    out_indices: tuple[int, ...]

    def _run(self, stages: nn.ModuleList, x: Tensor) -> list[Tensor]:
        out = []
        for i, stage in enumerate(stages):
            x = stage(x)
            if i in self.out_indices:
                out.append(x)
        return out


class TinyNASRes(_Outputs):
    """Sizes t and s: a Focus stem (``stem`` = (c_out, kernel)) and five residual stages."""

    def __init__(self, stem: tuple[int, int], stages: tuple[Stage, ...], *, act: str) -> None:
        super().__init__()
        self.out_indices = (2, 4, 5)
        self.block_list = nn.ModuleList([Focus(3, stem[0], stem[1], act)])
        for i, stage in enumerate(stages):
            self.block_list.append(ResStage(stage, act=act, with_spp=i == len(stages) - 1))

    def forward(self, x: Tensor) -> list[Tensor]:
        return self._run(self.block_list, x)


class CSPWrapper(nn.Module):
    """Cross-stage partial stage: downsample (stride 2, ReLU), optional SPP, then half the channels
    through the residual blocks (``convstem``), half straight (``conv_shortcut``), concatenated and
    fused. Its 1x1 convs use ReLU whatever the blocks use (upstream's default)."""

    def __init__(self, stages: tuple[Stage, ...], *, act: str, with_spp: bool = False) -> None:
        super().__init__()
        c_in, c_out = stages[0].c_in, stages[-1].c_out
        hidden = stages[0].c_out // 2
        self.convstem = nn.ModuleList()
        for stage in stages:
            # The wrapper downsamples, so a stride-2 stage loses one block; the first block of a
            # stride-1 stage reads half its input (upstream's CSPStem).
            count = stage.blocks - 1 if stage.stride == 2 else stage.blocks
            for i in range(count):
                block_in = stage.c_in // 2 if stage.stride == 1 and i == 0 else stage.c_out // 2
                self.convstem.append(ResConvBlock(block_in, stage.c_out // 2, stage.btn, 1, act=act,
                                                  wide_first=stage.wide_first))
        self.downsampler = ConvKXBNAct(c_in, 2 * hidden, 3, 2, "relu")
        self.spp = SPPBottleneck(2 * hidden, 2 * hidden) if with_spp else None
        if len(self.convstem):
            self.conv_start = ConvKXBNAct(2 * hidden, hidden, 1, 1, "relu")
            self.conv_shortcut = ConvKXBNAct(2 * hidden, c_out // 2, 1, 1, "relu")
            self.conv_fuse = ConvKXBNAct(c_out, c_out, 1, 1, "relu")

    def forward(self, x: Tensor) -> Tensor:
        x = self.downsampler(x)
        if self.spp is not None:
            x = self.spp(x)
        if not len(self.convstem):
            return x
        shortcut = self.conv_shortcut(x)
        x = self.conv_start(x)
        for block in self.convstem:
            x = block(x)
        return self.conv_fuse(torch.cat((x, shortcut), 1))


class TinyNASCSP(_Outputs):
    """Sizes m and l: a Focus stem and four CSP wrappers over the five stages (3 and 4 share one)."""

    def __init__(self, stem: tuple[int, int], stages: tuple[Stage, ...], *, act: str) -> None:
        super().__init__()
        self.out_indices = (2, 3, 4)
        self.csp_stage = nn.ModuleList([
            Focus(3, stem[0], stem[1], act),
            CSPWrapper(stages[:1], act=act), CSPWrapper(stages[1:2], act=act), CSPWrapper(stages[2:4], act=act),
            CSPWrapper(stages[4:], act=act, with_spp=True)])

    def forward(self, x: Tensor) -> list[Tensor]:
        return self._run(self.csp_stage, x)


class MobStage(nn.Module):
    """A nano stage: mobile blocks with expansion ``3.5 + 0.5 (position - 1)``, SPP after the first
    block of the last stage."""

    def __init__(self, stage: Stage, position: int, *, act: str, with_spp: bool) -> None:
        super().__init__()
        expansion = 3.5 + (position - 1) * 0.5
        self.block_list = nn.ModuleList()
        for i in range(stage.blocks):
            c_in, stride = (stage.c_in, stage.stride) if i == 0 else (stage.c_out, 1)
            self.block_list.append(MobileBlock(c_in, stage.c_out, expansion, stride, act=act, squeeze_slot=True))
            if i == 0 and with_spp:
                self.block_list.append(SPPBottleneck(stage.c_out, stage.c_out))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.block_list:
            x = block(x)
        return x


class TinyNASMob(_Outputs):
    """Nano sizes: a stride-2 3x3 conv stem and five mobile stages."""

    def __init__(self, stem: tuple[int, int], stages: tuple[Stage, ...], *, act: str) -> None:
        super().__init__()
        self.out_indices = (2, 4, 5)
        self.block_list = nn.ModuleList([ConvKXBNAct(3, stem[0], stem[1], 2, act)])
        for i, stage in enumerate(stages):
            self.block_list.append(MobStage(stage, i + 1, act=act, with_spp=i == len(stages) - 1))

    def forward(self, x: Tensor) -> list[Tensor]:
        return self._run(self.block_list, x)
