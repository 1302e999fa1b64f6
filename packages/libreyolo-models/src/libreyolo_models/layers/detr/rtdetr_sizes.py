"""RT-DETR's sizes as data: which backbone, how wide the encoder, how deep the decoder.

Values follow upstream LibreYOLO's size table (itself the official RT-DETR configs), so that every
size's state dict matches upstream's manifest key for key. No torch import: ``spec.py`` and the
registry read the size names from here cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Variant:
    """One size of RT-DETR.

    Attributes:
        backbone: ``"resnet"`` (ResNet-vd) or ``"hgnetv2"``.
        depth: ResNet depth (18, 34, 50, 101) or the HGNetv2 arch letter (``"L"``, ``"X"``).
        frozen_norm: the backbone's norms are ``FrozenBatchNorm2d`` (statistics and affine held in
            buffers, never trained), as upstream builds every size from r50 up.
        hidden_dim: encoder width (its input projections, AIFI layer and CCFM blocks).
        encoder_ffn: AIFI feed-forward width.
        expansion: CCFM (CSPRep) hidden width as a fraction of ``hidden_dim``.
        decoder_layers: deformable decoder layers (each has its own score and box head).
        eval_idx: the decoder layer whose output inference returns (-1: the last); training
            supervises all of them.
        decoder_dim, decoder_ffn: decoder width and feed-forward width.
    """

    backbone: Literal["resnet", "hgnetv2"]
    depth: int | str
    frozen_norm: bool
    hidden_dim: int
    encoder_ffn: int
    expansion: float
    decoder_layers: int
    eval_idx: int = -1
    decoder_dim: int = 256
    decoder_ffn: int = 1024


VARIANTS: dict[str, Variant] = {
    "r18": Variant("resnet", 18, False, 256, 1024, 0.5, 3),
    "r34": Variant("resnet", 34, False, 256, 1024, 0.5, 4),
    "r50": Variant("resnet", 50, True, 256, 1024, 1.0, 6),
    # r50m: r50's backbone with a half-width CCFM; upstream infers from decoder layer 3 of 6.
    "r50m": Variant("resnet", 50, True, 256, 1024, 0.5, 6, eval_idx=2),
    "r101": Variant("resnet", 101, True, 384, 2048, 1.0, 6),
    "l": Variant("hgnetv2", "L", True, 256, 1024, 1.0, 6),
    "x": Variant("hgnetv2", "X", True, 384, 2048, 1.0, 6),
}

# Shared by every size (the official configs'): three feature levels, eight heads, four sampling
# points per head and level, 300 queries chosen from the encoder's top-k. (The denoising settings
# every DETR family shares are in ``detr_family``.)
STRIDES = (8, 16, 32)
NUM_HEADS = 8
NUM_POINTS = 4
NUM_QUERIES = 300
