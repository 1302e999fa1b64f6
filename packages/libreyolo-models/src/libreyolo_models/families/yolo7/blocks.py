"""YOLOv7's building blocks (official WongKinYiu/yolov7 ``models/common.py`` semantics, own code):
the SPP-CSP-C block, the YOLOR implicit layers and the anchor-based ``IDetect`` head.

Attribute names (``cv1`` .. ``cv7``, ``m``, ``ia``, ``im``, ``implicit``, ``anchors``,
``anchor_grid``) are the official checkpoints' keys. Plain convolutions are ``layers.conv.Conv``
(``conv``/``bn``/``act``, BatchNorm eps 1e-3 and momentum 0.03, what the official
``initialize_weights`` sets); the RepVGG block is ``layers.repconv.RepConv3x3``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.conv import Conv


def conv(c_in: int, c_out: int, k: int = 1, s: int = 1, *, leaky: bool = False) -> Conv:
    """Conv-BN-activation: SiLU (YOLOv7, YOLOv7-X) or LeakyReLU(0.1) (YOLOv7-tiny)."""
    unit = Conv(c_in, c_out, k, s)
    if leaky:
        unit.act = nn.LeakyReLU(0.1)  # YOLOv7-tiny uses leaky ReLU where the others use SiLU
    return unit


class SPPCSPC(nn.Module):
    """CSP block around a 5/9/13 spatial pyramid pool (hidden width = ``c_out``)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        c = c_out
        self.cv1 = conv(c_in, c, 1)
        self.cv2 = conv(c_in, c, 1)
        self.cv3 = conv(c, c, 3)
        self.cv4 = conv(c, c, 1)
        self.m = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.cv5 = conv(4 * c, c, 1)
        self.cv6 = conv(c, c, 3)
        self.cv7 = conv(2 * c, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv4(self.cv3(self.cv1(x)))
        y = self.cv6(self.cv5(torch.cat([y, *(pool(y) for pool in self.m)], 1)))
        return self.cv7(torch.cat((y, self.cv2(x)), 1))


class Concat(nn.Module):
    """Channel concatenation of several earlier layers (no weights; keeps the layer numbering)."""

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.cat(xs, 1)


class ImplicitA(nn.Module):
    """YOLOR implicit knowledge, added: ``x + implicit`` (``implicit`` starts near 0)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.implicit = nn.Parameter(torch.empty(1, channels, 1, 1))
        nn.init.normal_(self.implicit, mean=0.0, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.implicit


class ImplicitM(nn.Module):
    """YOLOR implicit knowledge, multiplied: ``x * implicit`` (``implicit`` starts near 1)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.implicit = nn.Parameter(torch.empty(1, channels, 1, 1))
        nn.init.normal_(self.implicit, mean=1.0, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.implicit


class IDetect(nn.Module):
    """Anchor-based head with YOLOR implicit layers: per level ``im(m(ia(x)))``, 3 anchors x
    (4 box, 1 objectness, nc class) outputs.

    Buffers (stored in the official checkpoints): ``anchors`` ``[3, 3, 2]`` in grid units of each
    level (pixels / stride) and ``anchor_grid`` ``[3, 1, 3, 1, 1, 2]`` in pixels.
    """

    def __init__(self, nc: int, anchors_px: tuple[tuple[float, ...], ...], strides: tuple[int, ...],
                 channels: tuple[int, ...]) -> None:
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, len(anchors_px[0]) // 2
        self.strides = tuple(strides)
        grid = torch.tensor(anchors_px, dtype=torch.float32).view(len(strides), -1, 2)
        self.register_buffer("anchors", grid / torch.tensor(strides, dtype=torch.float32).view(-1, 1, 1))
        self.register_buffer("anchor_grid", grid.clone().view(len(strides), 1, -1, 1, 1, 2))
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)
        self.ia = nn.ModuleList(ImplicitA(c) for c in channels)
        self.im = nn.ModuleList(ImplicitM(self.no * self.na) for _ in channels)
        self.implicit_folded = False

    def initialize_biases(self) -> None:
        """Official priors: objectness for about 8 objects per 640 image, classes at 0.6 / (nc - 0.99)."""
        with torch.no_grad():
            for conv_out, s in zip(self._output_convs(), self.strides):
                bias = conv_out.bias.view(self.na, -1)  # type: ignore[union-attr]
                bias[:, 4] += math.log(8 / (640 / s) ** 2)
                bias[:, 5:] += math.log(0.6 / (self.nc - 0.99)) if self.nc > 1 else 0.0

    def _output_convs(self) -> list[nn.Conv2d]:
        convs = [m for m in self.m if isinstance(m, nn.Conv2d)]
        assert len(convs) == len(self.m)  # built as 1x1 convs
        return convs

    def raw_maps(self, feats: list[Tensor]) -> list[Tensor]:
        """Per level ``[B, 3, H, W, 5 + nc]`` raw logits (tx, ty, tw, th, objectness, classes)."""
        maps = []
        for i, x in enumerate(feats):
            y = self.m[i](x) if self.implicit_folded else self.im[i](self.m[i](self.ia[i](x)))
            b, _, h, w = y.shape
            maps.append(y.view(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).contiguous())
        return maps

    def decode(self, raw: list[Tensor]) -> Tensor:
        """Raw maps -> ``[B, A, 5 + nc]`` as the official eval forward: cx, cy, w, h in pixels, then
        objectness and class probabilities; rows anchor-major then row-major per level."""
        out = []
        for i, r in enumerate(raw):
            h, w = r.shape[2], r.shape[3]  # as the tensor reports them: symbolic in an export trace
            y = r.sigmoid()
            gy, gx = torch.meshgrid(torch.arange(h, device=r.device, dtype=r.dtype),
                                    torch.arange(w, device=r.device, dtype=r.dtype), indexing="ij")
            grid = torch.stack((gx, gy), -1)  # [H, W, 2]
            xy = (y[..., :2] * 2.0 - 0.5 + grid) * self.strides[i]
            wh = (y[..., 2:4] * 2.0) ** 2 * self.anchor_grid[i].to(r.dtype)  # type: ignore[index]
            out.append(torch.cat((xy, wh, y[..., 4:]), -1).view(r.shape[0], -1, self.no))
        return torch.cat(out, 1)

    def fuse_for_inference(self) -> bool:
        """Fold ``ia`` and ``im`` into new ``m`` convolutions (the official deploy conversion):
        ``im * (W (x + ia) + b) = (im W) x + im (b + W ia)``."""
        if self.implicit_folded:
            return False
        folded = nn.ModuleList()
        for conv_out, ia, im in zip(self._output_convs(), self.ia, self.im):
            assert isinstance(ia, ImplicitA) and isinstance(im, ImplicitM) and conv_out.bias is not None
            weight, bias = conv_out.weight.detach().double(), conv_out.bias.detach().double()
            add, mul = ia.implicit.detach().double().view(-1), im.implicit.detach().double().view(-1)
            new = nn.Conv2d(weight.shape[1], weight.shape[0], 1, device=weight.device, dtype=conv_out.weight.dtype)
            with torch.no_grad():
                new.weight.copy_(weight * mul.view(-1, 1, 1, 1))
                new.bias.copy_((bias + weight.flatten(1) @ add) * mul)  # type: ignore[union-attr]
            new.requires_grad_(False)
            folded.append(new)
        self.m = folded
        self.implicit_folded = True
        return True
