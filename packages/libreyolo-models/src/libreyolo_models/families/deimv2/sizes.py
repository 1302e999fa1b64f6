"""DEIMv2's sizes as data (upstream's size table, itself the official configs), so every size's
state dict matches upstream's manifest. No torch import: ``spec.py`` reads the names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Size:
    """One size of DEIMv2.

    Attributes:
        backbone: an HGNetv2 arch (``"Atto"``, ``"Femto"``, ``"Pico"``, ``"B0"``), ``"tiny"`` (a
            ViT-Tiny, ``vit_dim``/``vit_heads``) or a DINOv3 ViT (``"vits16"``, ``"vits16plus"``).
        returned: HGNetv2 stages, or ViT blocks, feeding the encoder.
        encoder: ``"lite"`` (one map, atto-pico), ``"elan4-csp2"`` (n) or ``"elan5-csp2"`` (s-x).
        dim, enc_ffn, expansion, depth_mult: encoder (= decoder) width, attention FFN, GELAN sizes.
        dec_ffn, depth, points, queries: decoder feed-forward width, layers, points per level, queries.
        small: atto/femto/pico: one box head for all layers, no gate, no FGL/DDF, own matches only.
        inplanes, hidden: the ViT adapter's spatial-prior width and output width (DINOv3 only).
        imgsz: the default (and anchor-buffer) input size.
        backbone_lr: the backbone's learning-rate multiplier (the ViT's only, for s-x).
        matcher_switch: share of the run after which matching ranks by ``-p * IoU**4``.
    """

    backbone: str
    returned: tuple[int, ...]
    encoder: Literal["lite", "elan4-csp2", "elan5-csp2"]
    dim: int
    dec_ffn: int
    depth: int
    points: tuple[int, ...]
    expansion: float
    depth_mult: float
    enc_ffn: int = 0
    queries: int = 300
    small: bool = False
    vit_dim: int = 0
    vit_heads: int = 0
    inplanes: int = 16
    imgsz: int = 640
    backbone_lr: float = 0.5
    matcher_switch: float = 0.85

    @property
    def dino(self) -> bool:
        return self.backbone in ("tiny", "vits16", "vits16plus")


SIZES: dict[str, Size] = {
    "atto": Size("Atto", (2,), "lite", 64, 160, 3, (4, 2), 0.34, 0.5, queries=100, small=True, imgsz=320,
                 matcher_switch=0.9),
    "femto": Size("Femto", (2,), "lite", 96, 256, 3, (4, 2), 0.34, 0.5, queries=150, small=True, imgsz=416,
                  matcher_switch=0.9),
    "pico": Size("Pico", (2,), "lite", 112, 320, 3, (4, 2), 0.34, 0.5, queries=200, small=True, matcher_switch=0.9),
    "n": Size("B0", (2, 3), "elan4-csp2", 128, 512, 3, (6, 6), 0.34, 0.5, enc_ffn=512),
    "s": Size("tiny", (3, 7, 11), "elan5-csp2", 192, 512, 4, (3, 6, 3), 0.34, 0.67, enc_ffn=512, vit_dim=192,
              vit_heads=3, backbone_lr=0.05, matcher_switch=0.76),
    "m": Size("tiny", (3, 7, 11), "elan5-csp2", 256, 512, 4, (3, 6, 3), 0.67, 1.0, enc_ffn=512, vit_dim=256,
              vit_heads=4, backbone_lr=0.05, matcher_switch=0.78),
    "l": Size("vits16", (5, 8, 11), "elan5-csp2", 224, 1792, 4, (3, 6, 3), 1.0, 1.0, enc_ffn=896, inplanes=32,
              backbone_lr=0.025, matcher_switch=0.74),
    "x": Size("vits16plus", (5, 8, 11), "elan5-csp2", 256, 2048, 6, (3, 6, 3), 1.25, 1.37, enc_ffn=1024,
              inplanes=64, backbone_lr=0.02, matcher_switch=0.78),
}
