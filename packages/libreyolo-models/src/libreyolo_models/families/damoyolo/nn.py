"""The DAMO-YOLO detection network (TinyNAS backbone, RepGFPN neck, ZeroHead): tensors in, tensors out.

No NMS, no ``.item()``, no data-dependent shapes: this module is what a CUDA graph captures. It
returns the same dict in train and eval mode.

Input convention: upstream's weights were trained on RGB pixels in 0..255 (no mean/std); every
seam of this project hands networks RGB in [0, 1], so ``forward`` scales inside the network (part
of a captured graph). ``upstream_outputs`` takes upstream's input and returns upstream's eval
outputs (what the compatibility vectors hold). State-dict keys match upstream LibreYOLO's
``Detector`` for every size (``tests/test_damoyolo_upstream_compat.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .backbones import Stage, TinyNASCSP, TinyNASMob, TinyNASRes
from .head import ZeroHead
from .neck import GiraffeNeck


@dataclass(frozen=True)
class DamoArch:
    """One size as data: backbone kind, its stem (c_out, kernel) and searched stages, the neck's
    widths and depth, and the head's bins and kernel (``reg_max`` 7 and 1x1 for nano, 16 and 3x3)."""

    backbone: str                  # "res" (t, s), "csp" (m, l), "mob" (ns, nm, nl)
    stem: tuple[int, int]
    stages: tuple[Stage, ...]
    backbone_act: str
    neck_in: tuple[int, int, int]
    neck_out: tuple[int, int, int]
    neck_depth: float
    neck_hidden_ratio: float
    neck_act: str
    reg_max: int = 16
    head_kernel: int = 3

    @property
    def depthwise_neck(self) -> bool:
        return self.backbone == "mob"


def _res(*rows: tuple[int, int, int, int, int], wide: bool = False) -> tuple[Stage, ...]:
    """Stages from ``(c_in, c_out, btn, blocks, stride)`` rows (TinyNAS's searched structures)."""
    return tuple(Stage(*row, wide_first=wide) for row in rows)


def _nano(stem: int, rows: tuple[tuple[int, int, int, int, int], ...], width: tuple[int, int, int]) -> DamoArch:
    return DamoArch("mob", (stem, 3), _res(*rows), "silu", width, width, 0.5, 0.5, "silu", reg_max=7, head_kernel=1)


ARCHS: dict[str, DamoArch] = {
    "ns": _nano(16, ((16, 24, 24, 1, 2), (24, 40, 64, 2, 2), (40, 64, 40, 2, 2), (64, 80, 152, 2, 1),
                     (80, 160, 192, 2, 2)), (40, 80, 160)),
    "nm": _nano(16, ((16, 40, 24, 2, 2), (40, 64, 64, 2, 2), (64, 112, 40, 2, 2), (112, 128, 152, 2, 1),
                     (128, 256, 192, 1, 2)), (64, 128, 256)),
    "nl": _nano(24, ((24, 48, 24, 1, 2), (48, 80, 64, 2, 2), (80, 160, 40, 2, 2), (160, 160, 152, 3, 1),
                     (160, 320, 192, 2, 2)), (80, 160, 320)),
    "t": DamoArch("res", (24, 3), _res((24, 64, 24, 2, 2), (64, 96, 64, 2, 2), (96, 192, 96, 2, 2),
                                       (192, 192, 152, 2, 1), (192, 384, 192, 1, 2)),
                  "relu", (96, 192, 384), (64, 128, 256), 1.0, 1.0, "relu"),
    "s": DamoArch("res", (32, 3), _res((32, 128, 24, 1, 2), (128, 128, 88, 5, 2), (128, 256, 128, 3, 2),
                                       (256, 256, 120, 2, 1), (256, 512, 144, 1, 2)),
                  "relu", (128, 256, 512), (128, 256, 512), 1.0, 0.75, "relu"),
    "m": DamoArch("csp", (32, 3), _res((32, 128, 64, 2, 2), (128, 128, 64, 4, 2), (128, 256, 256, 4, 2),
                                       (256, 256, 256, 4, 1), (256, 512, 256, 3, 2), wide=True),
                  "silu", (128, 256, 512), (128, 256, 512), 1.5, 1.0, "silu"),
    "l": DamoArch("csp", (32, 3), _res((32, 128, 96, 3, 2), (128, 128, 96, 5, 2), (128, 256, 384, 5, 2),
                                       (256, 256, 384, 5, 1), (256, 512, 384, 4, 2), wide=True),
                  "silu", (128, 256, 512), (128, 256, 512), 2.0, 1.0, "silu"),
}

_BACKBONES = {"res": TinyNASRes, "csp": TinyNASCSP, "mob": TinyNASMob}


def to_upstream_input(images: Tensor) -> Tensor:
    """RGB in [0, 1] -> RGB in [0, 255], what DAMO-YOLO weights expect."""
    return images * 255.0


class DamoYoloNet(nn.Module):
    """DAMO-YOLO detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels (priors at cell corners),
        then class scores after sigmoid; anchors row-major per level, strides 8, 16, 32.
        ``raw_outputs`` list of ``[B, nc + 4 (reg_max + 1), H/s, W/s]``: class logits, then the
        scaled box-distribution logits (side-major l, t, r, b); what the loss reads.
    """

    def __init__(self, size: str = "t", nc: int = 80) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"unknown DAMO-YOLO size {size!r}; known sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.size, self.nc, self.reg_max = size, nc, arch.reg_max
        self.backbone = _BACKBONES[arch.backbone](arch.stem, arch.stages, act=arch.backbone_act)
        self.neck = GiraffeNeck(arch.neck_in, arch.neck_out, arch.neck_depth, arch.neck_hidden_ratio,
                                act=arch.neck_act, depthwise=arch.depthwise_neck)
        self.head = ZeroHead(nc, arch.neck_out, arch.reg_max, arch.head_kernel)
        self.head.initialize_weights()

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """The training seam: the three raw head maps (input RGB in [0, 1])."""
        return self.head.raw_maps(self.neck(self.backbone(to_upstream_input(images))))

    def upstream_outputs(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Upstream's eval forward on its own input (RGB, 0..255): class scores after sigmoid
        ``[B, A, nc]`` and xyxy pixel boxes ``[B, A, 4]``."""
        return self.head.decode(self.head.raw_maps(self.neck(self.backbone(x))))

    def forward(self, images: Tensor) -> dict[str, Tensor | list[Tensor]]:
        raw = self.raw_outputs(images)
        scores, boxes = self.head.decode(raw)
        predictions = torch.cat((boxes.to(scores.dtype), scores), 2).transpose(1, 2)  # the shared NMS's layout
        return {"predictions": predictions, "raw_outputs": raw}
