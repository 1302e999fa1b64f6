"""YOLOv9's GELAN backbone and path-aggregation neck, per size, as YOLOv9 and YOLOv9-E2E build them.

Both families share this trunk key for key (``backbone.*`` and ``neck.*`` of upstream LibreYOLO
checkpoints) and differ only in the head, so the trunk lives here rather than in either family.
The attribute names (``conv0``, ``elan1``, ``down2``, ``spp``, ``elan_up1``, ...) are checkpoint keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .conv import Conv
from .gelan import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4


@dataclass(frozen=True)
class GelanArch:
    """One size's trunk as data.

    ``stages`` lists, per GELAN block, ``(c_in, c_out, c_mid, c_branch)``; the repeat count ``n``
    and block types are per size. Inputs of neck blocks include their concatenated skips.
    """

    stem: tuple[int, int]                       # conv0, conv1 output channels
    light_first_block: bool                     # t/s use ELAN1 for elan1, m/c a RepNCSPELAN4
    elan1: tuple[int, int, int, int]
    downsampler: str                            # "aconv" (t/s/m) or "adown" (c)
    down: tuple[tuple[int, int], ...]           # backbone down2..down4 (c_in, c_out)
    elan: tuple[tuple[int, int, int, int], ...]  # backbone elan2..elan4
    spp: tuple[int, int, int]                   # (c_in, c_out, c_mid)
    neck_up: tuple[tuple[int, int, int, int], ...]      # elan_up1, elan_up2
    neck_down: tuple[tuple[int, int], ...]              # neck down1, down2
    neck_elan: tuple[tuple[int, int, int, int], ...]    # elan_down1, elan_down2
    n: int                                       # RepNCSP depth

    @property
    def head_channels(self) -> tuple[int, int, int]:
        """Channels of the three neck outputs (strides 8, 16, 32) the head reads."""
        return (self.neck_up[1][1], self.neck_elan[0][1], self.neck_elan[1][1])


GELAN_ARCHS: dict[str, GelanArch] = {
    "t": GelanArch(
        stem=(16, 32), light_first_block=True, elan1=(32, 32, 32, 16), downsampler="aconv",
        down=((32, 64), (64, 96), (96, 128)),
        elan=((64, 64, 64, 32), (96, 96, 96, 48), (128, 128, 128, 64)), spp=(128, 128, 64),
        neck_up=((224, 96, 96, 48), (160, 64, 64, 32)), neck_down=((64, 48), (96, 64)),
        neck_elan=((144, 96, 96, 48), (192, 128, 128, 64)), n=3),
    "s": GelanArch(
        stem=(32, 64), light_first_block=True, elan1=(64, 64, 64, 32), downsampler="aconv",
        down=((64, 128), (128, 192), (192, 256)),
        elan=((128, 128, 128, 64), (192, 192, 192, 96), (256, 256, 256, 128)), spp=(256, 256, 128),
        neck_up=((448, 192, 192, 96), (320, 128, 128, 64)), neck_down=((128, 96), (192, 128)),
        neck_elan=((288, 192, 192, 96), (384, 256, 256, 128)), n=3),
    "m": GelanArch(
        stem=(32, 64), light_first_block=False, elan1=(64, 128, 128, 64), downsampler="aconv",
        down=((128, 240), (240, 360), (360, 480)),
        elan=((240, 240, 240, 120), (360, 360, 360, 180), (480, 480, 480, 240)), spp=(480, 480, 240),
        neck_up=((840, 360, 360, 180), (600, 240, 240, 120)), neck_down=((240, 184), (360, 240)),
        neck_elan=((544, 360, 360, 180), (720, 480, 480, 240)), n=1),
    "c": GelanArch(
        stem=(64, 128), light_first_block=False, elan1=(128, 256, 128, 64), downsampler="adown",
        down=((256, 256), (512, 512), (512, 512)),
        elan=((256, 512, 256, 128), (512, 512, 512, 256), (512, 512, 512, 256)), spp=(512, 512, 256),
        neck_up=((1024, 512, 512, 256), (1024, 256, 256, 128)), neck_down=((256, 256), (512, 512)),
        neck_elan=((768, 512, 512, 256), (1024, 512, 512, 256)), n=1),
}


def gelan_size_from_state(state: Mapping[str, Tensor]) -> str | None:
    """The trunk size a bare state dict was saved from (the stem width and the first block's type),
    or None when it holds no GELAN stem."""
    key = "backbone.conv0.conv.weight"
    if key not in state:
        return None
    stem = int(state[key].shape[0])
    if stem == 16:
        return "t"
    if stem == 64:
        return "c"
    return "m" if "backbone.elan1.cv2.0.cv1.conv.weight" in state else "s"


def _downsampler(kind: str, c_in: int, c_out: int) -> nn.Module:
    return AConv(c_in, c_out) if kind == "aconv" else ADown(c_in, c_out)


class GelanBackbone(nn.Module):
    """Stem, four GELAN stages and SPP-ELAN; returns the stride 8, 16 and 32 feature maps."""

    def __init__(self, arch: GelanArch) -> None:
        super().__init__()
        self.conv0 = Conv(3, arch.stem[0], 3, 2)
        self.conv1 = Conv(arch.stem[0], arch.stem[1], 3, 2)
        self.elan1 = ELAN1(*arch.elan1) if arch.light_first_block else RepNCSPELAN4(*arch.elan1, arch.n)
        self.down2 = _downsampler(arch.downsampler, *arch.down[0])
        self.elan2 = RepNCSPELAN4(*arch.elan[0], arch.n)
        self.down3 = _downsampler(arch.downsampler, *arch.down[1])
        self.elan3 = RepNCSPELAN4(*arch.elan[1], arch.n)
        self.down4 = _downsampler(arch.downsampler, *arch.down[2])
        self.elan4 = RepNCSPELAN4(*arch.elan[2], arch.n)
        self.spp = SPPELAN(*arch.spp)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.elan1(self.conv1(self.conv0(x)))
        p3 = self.elan2(self.down2(x))
        p4 = self.elan3(self.down3(p3))
        p5 = self.spp(self.elan4(self.down4(p4)))
        return p3, p4, p5


class GelanNeck(nn.Module):
    """Top-down then bottom-up path aggregation over the three backbone levels."""

    def __init__(self, arch: GelanArch) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.elan_up1 = RepNCSPELAN4(*arch.neck_up[0], arch.n)
        self.elan_up2 = RepNCSPELAN4(*arch.neck_up[1], arch.n)
        self.down1 = _downsampler(arch.downsampler, *arch.neck_down[0])
        self.elan_down1 = RepNCSPELAN4(*arch.neck_elan[0], arch.n)
        self.down2 = _downsampler(arch.downsampler, *arch.neck_down[1])
        self.elan_down2 = RepNCSPELAN4(*arch.neck_elan[1], arch.n)

    def forward(self, p3: Tensor, p4: Tensor, p5: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        n4 = self.elan_up1(torch.cat((self.up(p5), p4), 1))
        n3 = self.elan_up2(torch.cat((self.up(n4), p3), 1))
        o4 = self.elan_down1(torch.cat((self.down1(n3), n4), 1))
        o5 = self.elan_down2(torch.cat((self.down2(o4), p5), 1))
        return n3, o4, o5
