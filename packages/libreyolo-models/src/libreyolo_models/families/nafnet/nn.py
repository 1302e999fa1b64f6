"""The NAFNet network: a four-level U-Net of NAF blocks; tensors in, restored images out.

Architecture as published (Chen, Chu, Zhang, Sun, 2022, "Simple Baselines for Image
Restoration"), with the facts read from the official repository (megvii-research/NAFNet,
``basicsr/models/archs/NAFNet_arch.py``, ``arch_util.py`` and the ``options/`` files; see
``docs/families/nafnet.md``):

- a NAF block: LayerNorm over channels (eps 1e-6) -> 1x1 conv doubling the width -> 3x3
  depthwise conv -> SimpleGate (the two halves of the channels multiplied, which halves them)
  -> simplified channel attention (global average pool, 1x1 conv, multiply) -> 1x1 conv, added
  to the input scaled by ``beta``; then LayerNorm -> 1x1 conv doubling -> SimpleGate -> 1x1 conv,
  added scaled by ``gamma``. ``beta`` and ``gamma`` start at zero, so every block starts as the
  identity. No nonlinear activation anywhere.
- the U-Net: a 3x3 ``intro`` conv to ``width`` channels; per encoder level its blocks then a 2x2
  stride-2 conv doubling the channels; the middle blocks; per decoder level a 1x1 conv doubling the
  channels then PixelShuffle(2) (halving them), the matching encoder output added, its blocks; a
  3x3 ``ending`` conv back to RGB added to the input (a global residual).
- inputs whose sides are not multiples of ``2 ** levels`` are padded with zeros on the right and
  bottom and the output cropped back, as the official forward does.

Attribute names are the official checkpoints' keys (``intro``, ``encoders.0.1.conv2``,
``encoders.0.0.sca.1``, ``downs.0``, ``middle_blks.3.norm1``, ``ups.2.0``, ``decoders.1.0.beta``,
``ending``...): treat them as a file format. Inputs are RGB in [0, 1] (no normalisation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORM_EPS = 1e-6  # the official LayerNorm2d's


@dataclass(frozen=True)
class NAFNetArch:
    """One size as data: base width and the block count of each level."""

    width: int
    enc_blocks: tuple[int, ...]
    middle_blocks: int
    dec_blocks: tuple[int, ...]


_SIDD_BLOCKS = ((2, 2, 4, 8), 12, (2, 2, 2, 2))     # options/*/SIDD/NAFNet-width{32,64}.yml
_GOPRO_BLOCKS = ((1, 1, 1, 28), 1, (1, 1, 1, 1))    # options/*/GoPro/NAFNet-width{32,64}.yml (REDS: the same)
ARCHS: dict[str, NAFNetArch] = {
    # ours, not a published model: small enough to train on a CPU in tests and demos
    "t": NAFNetArch(16, (1, 1, 1, 1), 1, (1, 1, 1, 1)),
    "sidd32": NAFNetArch(32, *_SIDD_BLOCKS),
    "sidd64": NAFNetArch(64, *_SIDD_BLOCKS),
    "gopro32": NAFNetArch(32, *_GOPRO_BLOCKS),
    "gopro64": NAFNetArch(64, *_GOPRO_BLOCKS),
}


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of a ``[B, C, H, W]`` map, per pixel (biased variance)."""

    def __init__(self, channels: int, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(1, keepdim=True)
        centred = x - mean
        var = centred.pow(2).mean(1, keepdim=True)
        y = centred / (var + self.eps).sqrt()
        return self.weight.view(1, -1, 1, 1) * y + self.bias.view(1, -1, 1, 1)


def simple_gate(x: Tensor) -> Tensor:
    """The two halves of the channels multiplied: NAFNet's replacement for an activation."""
    a, b = x.chunk(2, dim=1)
    return a * b


class NAFBlock(nn.Module):
    """One NAF block of ``c`` channels (depthwise and feed-forward expansion 2, no dropout)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        dw = 2 * c
        self.conv1 = nn.Conv2d(c, dw, 1)
        self.conv2 = nn.Conv2d(dw, dw, 3, padding=1, groups=dw)
        self.conv3 = nn.Conv2d(dw // 2, c, 1)
        # simplified channel attention; index 1 is the published key ``sca.1``
        self.sca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(dw // 2, dw // 2, 1))
        self.conv4 = nn.Conv2d(c, 2 * c, 1)
        self.conv5 = nn.Conv2d(c, c, 1)
        self.norm1 = LayerNorm2d(c)
        self.norm2 = LayerNorm2d(c)
        self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, inp: Tensor) -> Tensor:
        x = simple_gate(self.conv2(self.conv1(self.norm1(inp))))
        x = self.conv3(x * self.sca(x))
        y = inp + x * self.beta
        x = self.conv5(simple_gate(self.conv4(self.norm2(y))))
        return y + x * self.gamma


class NAFNet(nn.Module):
    """``[B, 3, H, W]`` RGB in [0, 1] (any size) -> the restored ``[B, 3, H, W]`` (not clamped)."""

    def __init__(self, arch: NAFNetArch, channels: int = 3) -> None:
        super().__init__()
        if len(arch.enc_blocks) != len(arch.dec_blocks):
            raise ValueError(f"NAFNet needs as many decoder as encoder levels, got {arch}")
        chan = arch.width
        # registered in the official order (intro, ending, encoders, decoders, middle_blks, ups,
        # downs), which is the checkpoints' key order
        self.intro = nn.Conv2d(channels, chan, 3, padding=1)
        self.ending = nn.Conv2d(chan, channels, 3, padding=1)
        self.encoders = nn.ModuleList()
        self.decoders = nn.ModuleList()
        self.middle_blks = nn.Sequential()
        self.ups = nn.ModuleList()
        self.downs = nn.ModuleList()
        for blocks in arch.enc_blocks:
            self.encoders.append(nn.Sequential(*(NAFBlock(chan) for _ in range(blocks))))
            self.downs.append(nn.Conv2d(chan, 2 * chan, 2, 2))
            chan *= 2
        self.middle_blks.extend(NAFBlock(chan) for _ in range(arch.middle_blocks))
        for blocks in arch.dec_blocks:
            self.ups.append(nn.Sequential(nn.Conv2d(chan, 2 * chan, 1, bias=False), nn.PixelShuffle(2)))
            chan //= 2
            self.decoders.append(nn.Sequential(*(NAFBlock(chan) for _ in range(blocks))))
        self.multiple = 2 ** len(arch.enc_blocks)

    def forward(self, images: Tensor) -> Tensor:
        h, w = images.shape[-2:]
        pad_h, pad_w = (-h) % self.multiple, (-w) % self.multiple
        inp = F.pad(images, (0, pad_w, 0, pad_h)) if pad_h or pad_w else images
        x = self.intro(inp)
        skips = []
        for encoder, down in zip(self.encoders, self.downs):
            x = encoder(x)
            skips.append(x)
            x = down(x)
        x = self.middle_blks(x)
        for decoder, up, skip in zip(self.decoders, self.ups, reversed(skips)):
            x = decoder(up(x) + skip)
        out = self.ending(x) + inp
        return out[:, :, :h, :w] if pad_h or pad_w else out

