"""The BiRefNet network, in the official default configuration, as a sequence of stages.

Facts from the official ``config.py`` / ``models/birefnet.py`` (see ``docs/families/birefnet.md``):
the backbone runs on the image and on the image at half size, and each level is the two
concatenated (``mul_scl_ipt='cat'``), so the lateral widths are twice Swin's (T: 1536, 768, 384,
192); the three shallower levels, resized to the deepest, are concatenated onto it (``cxt_num=3``)
and squeezed by one decoder block (``squeeze_module``); the decoder adds, at every level, the
input image cut into patches stacked as channels (``dec_ipt_split``: ``ipt_blk5..1``), lateral
1x1 convs, multi-scale supervision maps (``conv_ms_spvn_4..2``) and gradient-attention gates
(``gdt_convs_*``, ``gdt_convs_attn_*``; ``gdt_convs_pred_*`` exist for the gradient loss). BN is
present everywhere (the official checkpoints were trained with batch > 1).

The forward is written as six plain stages with the five deformable ASPPs (squeeze and four
decoder blocks) between them (:meth:`BiRefNet.stages`): ``forward`` runs them in turn, and the
segmented graph path replays the plain stages from CUDA graphs around the same eager samplings.
Every stage passes four carried tensors, then the next block's inputs. The output is four logit
maps, coarse to fine: ``(m4 1/32, m3 1/16, m2 1/8, p1 full)``; the last is the matte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.normalize import InputNormalize
from .blocks import DecoderBlock, SimpleConvs, deform_branches
from .swin import SWIN, SwinTransformer

Stage = tuple[Callable[..., Any], bool, str]  # (fn, graphable, name)
CARRIED = 4  # tensors every stage hands on before a block's own
STRIDE = 32
GDT = 16  # the gradient-attention width (_N)


@dataclass(frozen=True)
class BiRefArch:
    """One size: its Swin backbone (the rest of the network follows from its widths)."""

    backbone: str


ARCHS: dict[str, BiRefArch] = {"t": BiRefArch("swin_v1_t"), "l": BiRefArch("swin_v1_l")}


def lateral_channels(arch: BiRefArch) -> list[int]:
    """The decoder's input widths, deepest first, doubled by the half-size pass's concatenation."""
    return [2 * w for w in reversed(SWIN[arch.backbone].widths)]


def image_patches(x: Tensor, ref: Tensor) -> Tensor:
    """``x`` cut into a grid of patches the size of ``ref``'s map, stacked as channels in (c, row,
    column) order (the official ``b c (hg h) (wg w) -> b (c hg wg) h w``)."""
    b, c, hh, ww = x.shape
    gh, gw = hh // ref.shape[-2], ww // ref.shape[-1]
    return x.view(b, c, gh, hh // gh, gw, ww // gw).permute(0, 1, 2, 4, 3, 5).reshape(b, c * gh * gw, hh // gh,
                                                                                         ww // gw)


def resize(x: Tensor, like: Tensor | tuple[int, int]) -> Tensor:
    size = tuple(like.shape[2:]) if isinstance(like, Tensor) else like
    return F.interpolate(x, size=size, mode="bilinear", align_corners=True)


class LateralBlock(nn.Module):
    """``BasicLatBlk``: one 1x1 conv (key ``conv``)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class Decoder(nn.Module):
    """The official ``Decoder`` modules (keys), driven stage by stage by :class:`BiRefNet`."""

    def __init__(self, channels: list[int]) -> None:
        super().__init__()
        ipt_in = [3 * 4 ** k for k in (5, 4, 3, 2, 0)]  # patches of a 32/16/8/4/1-pixel grid, as channels
        ipt_out = [c // 8 for c in channels]
        self.ipt_blk5 = SimpleConvs(ipt_in[0], ipt_out[0])
        self.ipt_blk4 = SimpleConvs(ipt_in[1], ipt_out[0])
        self.ipt_blk3 = SimpleConvs(ipt_in[2], ipt_out[1])
        self.ipt_blk2 = SimpleConvs(ipt_in[3], ipt_out[2])
        self.ipt_blk1 = SimpleConvs(ipt_in[4], ipt_out[3])
        out = [*channels[1:], channels[-1] // 2]
        self.decoder_block4 = DecoderBlock(channels[0] + ipt_out[0], out[0])
        self.decoder_block3 = DecoderBlock(channels[1] + ipt_out[0], out[1])
        self.decoder_block2 = DecoderBlock(channels[2] + ipt_out[1], out[2])
        self.decoder_block1 = DecoderBlock(channels[3] + ipt_out[2], out[3])
        self.conv_out1 = nn.Sequential(nn.Conv2d(out[3] + ipt_out[3], 1, 1))
        self.lateral_block4 = LateralBlock(channels[1], out[0])
        self.lateral_block3 = LateralBlock(channels[2], out[1])
        self.lateral_block2 = LateralBlock(channels[3], out[2])
        for level, width in zip((4, 3, 2), out):
            self.add_module(f"conv_ms_spvn_{level}", nn.Conv2d(width, 1, 1))
        for level, width in zip((4, 3, 2), out):
            self.add_module(f"gdt_convs_{level}", nn.Sequential(nn.Conv2d(width, GDT, 3, 1, 1), nn.BatchNorm2d(GDT),
                                                                nn.ReLU()))
        for kind in ("pred", "attn"):
            for level in (4, 3, 2):
                self.add_module(f"gdt_convs_{kind}_{level}", nn.Sequential(nn.Conv2d(GDT, 1, 1)))

    def side_and_gate(self, level: int, p: Tensor) -> tuple[Tensor, Tensor]:
        """-> (the level's supervision logits, ``p`` gated by its gradient attention)."""
        side = getattr(self, f"conv_ms_spvn_{level}")(p)
        gate = getattr(self, f"gdt_convs_attn_{level}")(getattr(self, f"gdt_convs_{level}")(p)).sigmoid()
        return side, p * gate


class BiRefNet(nn.Module):
    """``[B, 3, H, W]`` RGB in [0, 1] (H, W multiples of 32) -> four logit maps, coarse to fine."""

    def __init__(self, arch: BiRefArch, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        self.normalize = InputNormalize(mean, std)
        self.bb = SwinTransformer(SWIN[arch.backbone])
        channels = lateral_channels(arch)
        context = sum(channels[1:])  # the three shallower levels concatenated onto the deepest
        self.squeeze_module = nn.Sequential(DecoderBlock(channels[0] + context, channels[0]))
        self.decoder = Decoder(channels)

    @property
    def squeeze(self) -> DecoderBlock:
        """The squeeze block (``squeeze_module.0``: a one-block Sequential, as the official keys say)."""
        return cast(DecoderBlock, self.squeeze_module[0])

    # ---------------------------------------------------------------- the plain stages
    def encode(self, images: Tensor) -> tuple[Tensor, ...]:
        x = self.normalize(images)
        full = self.bb(x)
        half = self.bb(F.interpolate(x, size=(x.shape[2] // 2, x.shape[3] // 2), mode="bilinear",
                                     align_corners=True))
        x1, x2, x3, x4 = (torch.cat([f, resize(h, f)], 1) for f, h in zip(full, half))
        x4 = torch.cat([resize(x1, x4), resize(x2, x4), resize(x3, x4), x4], 1)
        return (x, x1, x2, x3, *self.squeeze.enter(x4))

    def start_decoder(self, x: Tensor, x1: Tensor, x2: Tensor, x3: Tensor, *squeezed: Tensor) -> tuple[Tensor, ...]:
        d = self.decoder
        x4 = self.squeeze.leave(*squeezed)
        x4 = torch.cat([x4, d.ipt_blk5(resize(image_patches(x, x4), x4))], 1)
        return (x, x1, x2, x3, *d.decoder_block4.enter(x4))

    def level4(self, x: Tensor, x1: Tensor, x2: Tensor, x3: Tensor, *block: Tensor) -> tuple[Tensor, ...]:
        d = self.decoder
        m4, p4 = d.side_and_gate(4, d.decoder_block4.leave(*block))
        p3 = resize(p4, x3) + d.lateral_block4(x3)
        p3 = torch.cat([p3, d.ipt_blk4(resize(image_patches(x, p3), x3))], 1)
        return (x, x1, x2, m4, *d.decoder_block3.enter(p3))

    def level3(self, x: Tensor, x1: Tensor, x2: Tensor, m4: Tensor, *block: Tensor) -> tuple[Tensor, ...]:
        d = self.decoder
        m3, p3 = d.side_and_gate(3, d.decoder_block3.leave(*block))
        p2 = resize(p3, x2) + d.lateral_block3(x2)
        p2 = torch.cat([p2, d.ipt_blk3(resize(image_patches(x, p2), x2))], 1)
        return (x, x1, m4, m3, *d.decoder_block2.enter(p2))

    def level2(self, x: Tensor, x1: Tensor, m4: Tensor, m3: Tensor, *block: Tensor) -> tuple[Tensor, ...]:
        d = self.decoder
        m2, p2 = d.side_and_gate(2, d.decoder_block2.leave(*block))
        p1 = resize(p2, x1) + d.lateral_block2(x1)
        p1 = torch.cat([p1, d.ipt_blk2(resize(image_patches(x, p1), x1))], 1)
        return (x, m4, m3, m2, *d.decoder_block1.enter(p1))

    def finish(self, x: Tensor, m4: Tensor, m3: Tensor, m2: Tensor, *block: Tensor) -> tuple[Tensor, ...]:
        d = self.decoder
        p1 = resize(d.decoder_block1.leave(*block), x)
        p1 = torch.cat([p1, d.ipt_blk1(resize(image_patches(x, p1), x))], 1)
        return m4, m3, m2, d.conv_out1(p1)

    # ---------------------------------------------------------------- the order
    def stages(self) -> list[Stage]:
        """The forward as (fn, graphable, name): plain stages graphable, the five deformable
        samplings (squeeze block, decoder blocks 4..1) not. Each fn takes what the previous returned."""
        blocks: list[tuple[str, DecoderBlock]] = [("squeeze", self.squeeze), ("block4", self.decoder.decoder_block4),
                  ("block3", self.decoder.decoder_block3), ("block2", self.decoder.decoder_block2),
                  ("block1", self.decoder.decoder_block1)]
        plain: list[tuple[str, Callable[..., Any]]] = [("encode", self.encode), ("start_decoder", self.start_decoder), ("level4", self.level4),
                 ("level3", self.level3), ("level2", self.level2), ("finish", self.finish)]
        order: list[Stage] = []
        for (name, fn), (block_name, block) in zip(plain, blocks):
            order.append((fn, True, name))
            order.append((_sampling(block), False, f"deform_{block_name}"))
        order.append((plain[-1][1], True, plain[-1][0]))
        return order

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        value: tuple[Tensor, ...] = (images,)
        for fn, _, _ in self.stages():
            value = fn(*value)
        return value


def _sampling(block: DecoderBlock) -> Callable[..., tuple[Tensor, ...]]:
    """The eager stage of ``block``: carried tensors pass through, its samplings run."""
    def sample(*state: Tensor) -> tuple[Tensor, ...]:
        return (*state[:CARRIED], *deform_branches(block, *state[CARRIED:]))

    sample.__qualname__ = f"deform_{type(block).__name__}"
    return sample
