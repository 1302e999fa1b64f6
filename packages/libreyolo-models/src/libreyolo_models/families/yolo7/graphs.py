"""The three official YOLOv7 layer graphs (``cfg/training/yolov7-tiny.yaml``, ``yolov7.yaml``,
``yolov7x.yaml``), built from their repeating patterns.

The official model is a flat, numbered list of layers, each reading the previous layer or earlier
ones by index; the numbers are the checkpoint keys (``model.24.conv.weight``, ``model.105.m.0.bias``),
so this module rebuilds the same list, layer for layer, from a few patterns instead of a config
file: an ELAN block (two 1x1 branches, a chain of 3x3 convs, a concatenation of chosen chain
outputs, a 1x1 fuse), the max-pool/stride-2 transition, and the routes between them. Layers
without weights (max-pools, concatenations, upsampling) keep their places so the numbering holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from ...layers.repconv import RepConv3x3
from .blocks import SPPCSPC, Concat, conv

STRIDES = (8, 16, 32)
ANCHORS_TINY = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))
ANCHORS_P5 = ((12, 16, 19, 36, 40, 28), (36, 75, 76, 55, 72, 146), (142, 110, 192, 243, 459, 401))


@dataclass
class LayerGraph:
    """Layers in official order; ``sources[i]`` are the absolute indices layer ``i`` reads (one,
    or several for a concatenation); ``channels[i]`` its output width."""

    leaky: bool = False
    layers: list[nn.Module] = field(default_factory=list)
    sources: list[tuple[int, ...]] = field(default_factory=list)
    channels: list[int] = field(default_factory=list)

    @property
    def last(self) -> int:
        return len(self.layers) - 1

    def add(self, module: nn.Module, sources: tuple[int, ...], c_out: int) -> int:
        self.layers.append(module)
        self.sources.append(sources)
        self.channels.append(c_out)
        return self.last

    def conv(self, src: int, c_out: int, k: int = 1, s: int = 1) -> int:
        return self.add(conv(self.channels[src], c_out, k, s, leaky=self.leaky), (src,), c_out)

    def concat(self, srcs: tuple[int, ...]) -> int:
        return self.add(Concat(), srcs, sum(self.channels[i] for i in srcs))

    def concat_back(self, offsets: tuple[int, ...]) -> int:
        """A concatenation naming its inputs by offset from itself (-1: the layer before)."""
        here = len(self.layers)
        return self.concat(tuple(here + o for o in offsets))

    def pool(self, src: int, k: int, s: int) -> int:
        return self.add(nn.MaxPool2d(k, s, k // 2 if s == 1 else 0), (src,), self.channels[src])

    def upsample(self, src: int) -> int:
        return self.add(nn.Upsample(scale_factor=2, mode="nearest"), (src,), self.channels[src])

    def elan(self, src: int, c_branch: int, c_chain: int, chain: int, take: tuple[int, ...], c_out: int) -> int:
        """Two 1x1 convs of ``src`` (the second feeds a chain of ``chain`` 3x3 convs), the outputs
        at offsets ``take`` concatenated, then a 1x1 conv to ``c_out``."""
        self.conv(src, c_branch)
        last = self.conv(src, c_branch)
        for _ in range(chain):
            last = self.conv(last, c_chain, 3)
        self.concat_back(take)
        return self.conv(self.last, c_out)

    def transition(self, src: int, c: int, extra: tuple[int, ...] = ()) -> int:
        """Downsample by 2 in two halves: max-pool + 1x1, and 1x1 + stride-2 3x3; concatenated
        (with ``extra`` routed layers after them)."""
        self.pool(src, 2, 2)
        pooled = self.conv(self.last, c)
        self.conv(src, c)
        strided = self.conv(self.last, c, 3, 2)
        return self.concat((strided, pooled, *extra))


def tiny() -> tuple[LayerGraph, tuple[int, int, int]]:
    """YOLOv7-tiny: LeakyReLU(0.1), short ELANs (two 3x3 convs), max-pool downsampling."""
    g = LayerGraph(leaky=True)
    g.add(conv(3, 32, 3, 2, leaky=True), (-1,), 32)
    g.conv(0, 64, 3, 2)

    def elan(src: int, c: int, c_out: int) -> int:
        return g.elan(src, c, c, 2, (-1, -2, -3, -4), c_out)

    p2 = elan(1, 32, 64)
    p3 = elan(g.pool(p2, 2, 2), 64, 128)
    p4 = elan(g.pool(p3, 2, 2), 128, 256)
    p5 = elan(g.pool(p4, 2, 2), 256, 512)
    # SPP-CSP in plain layers: two 1x1 branches, pools 5/9/13 of the second, fused, then joined.
    first = g.conv(p5, 256)
    second = g.conv(p5, 256)
    for k in (5, 9, 13):
        g.pool(second, k, 1)
    g.concat_back((-1, -2, -3, -4))
    g.conv(g.last, 256)
    g.concat((g.last, first))
    top = g.conv(g.last, 256)
    lateral = g.conv(top, 128)
    up = g.upsample(lateral)
    g.concat((g.conv(p4, 128), up))
    mid = elan(g.last, 64, 128)
    lateral = g.conv(mid, 64)
    up = g.upsample(lateral)
    g.concat((g.conv(p3, 64), up))
    out3 = elan(g.last, 32, 64)
    g.concat((g.conv(out3, 128, 3, 2), mid))
    out4 = elan(g.last, 64, 128)
    g.concat((g.conv(out4, 256, 3, 2), top))
    out5 = elan(g.last, 128, 256)
    heads = (g.conv(out3, 128, 3), g.conv(out4, 256, 3), g.conv(out5, 512, 3))
    return g, heads


def base() -> tuple[LayerGraph, tuple[int, int, int]]:
    """YOLOv7: SiLU, ELANs of four 3x3 convs, two-half transitions, SPPCSPC, RepConv outputs."""
    g = LayerGraph()
    g.add(conv(3, 32, 3), (-1,), 32)
    g.conv(g.conv(g.conv(0, 64, 3, 2), 64, 3), 128, 3, 2)

    def backbone_elan(src: int, c: int) -> int:
        return g.elan(src, c, c, 4, (-1, -3, -5, -6), 4 * c)

    def head_elan(src: int, c: int) -> int:
        return g.elan(src, c, c // 2, 4, (-1, -2, -3, -4, -5, -6), c)

    c3 = backbone_elan(3, 64)
    c4 = backbone_elan(g.transition(c3, 128), 128)
    c5 = backbone_elan(g.transition(c4, 256), 256)
    c6 = g.elan(g.transition(c5, 512), 256, 256, 4, (-1, -3, -5, -6), 1024)
    spp = g.add(SPPCSPC(1024, 512), (c6,), 512)
    up = g.upsample(g.conv(spp, 256))
    g.concat((g.conv(c5, 256), up))
    n4 = head_elan(g.last, 256)
    up = g.upsample(g.conv(n4, 128))
    g.concat((g.conv(c4, 128), up))
    out3 = head_elan(g.last, 128)
    out4 = head_elan(g.transition(out3, 128, (n4,)), 256)
    out5 = head_elan(g.transition(out4, 256, (spp,)), 512)
    heads = tuple(g.add(RepConv3x3(g.channels[s], c, act=nn.SiLU()), (s,), c)
                  for s, c in ((out3, 256), (out4, 512), (out5, 1024)))
    return g, heads  # type: ignore[return-value]


def x() -> tuple[LayerGraph, tuple[int, int, int]]:
    """YOLOv7-X: wider, ELANs of six 3x3 convs (outputs -1, -3, -5, -7, -8) everywhere."""
    g = LayerGraph()
    g.add(conv(3, 40, 3), (-1,), 40)
    g.conv(g.conv(g.conv(0, 80, 3, 2), 80, 3), 160, 3, 2)

    def elan(src: int, c: int, c_out: int) -> int:
        return g.elan(src, c, c, 6, (-1, -3, -5, -7, -8), c_out)

    c3 = elan(3, 64, 320)
    c4 = elan(g.transition(c3, 160), 128, 640)
    c5 = elan(g.transition(c4, 320), 256, 1280)
    c6 = elan(g.transition(c5, 640), 256, 1280)
    spp = g.add(SPPCSPC(1280, 640), (c6,), 640)
    up = g.upsample(g.conv(spp, 320))
    g.concat((g.conv(c5, 320), up))
    n4 = elan(g.last, 256, 320)
    up = g.upsample(g.conv(n4, 160))
    g.concat((g.conv(c4, 160), up))
    out3 = elan(g.last, 128, 160)
    out4 = elan(g.transition(out3, 160, (n4,)), 256, 320)
    out5 = elan(g.transition(out4, 320, (spp,)), 512, 640)
    heads = (g.conv(out3, 320, 3), g.conv(out4, 640, 3), g.conv(out5, 1280, 3))
    return g, heads


GRAPHS = {"tiny": (tiny, ANCHORS_TINY), "base": (base, ANCHORS_P5), "x": (x, ANCHORS_P5)}
