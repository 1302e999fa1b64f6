"""EC's sizes as data: the ViT's width, the encoder's and decoder's widths and depths, per task.

Values follow upstream LibreYOLO's size table (itself EdgeCrafter's ``ec_{s,m,l,x}`` configs), so
every size's state dict matches upstream's manifest key for key. No torch import: ``spec.py``
reads the size names from here cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One size of EC.

    Attributes:
        vit_width, vit_heads: the ViT (12 layers, 16-pixel patches).
        vit_ffn_ratio: the ViT's feed-forward width over its width.
        proj_dim: the adapter projects every pyramid level to this width (None: only the coarsest
            level gets a 1x1 conv + BatchNorm, at the ViT's width).
        hidden: encoder and decoder width.
        encoder_ffn: the encoder's transformer layer's feed-forward width.
        expansion, depth_mult: the encoder's fusion blocks' width ratio and depth multiplier.
        decoder_ffn: the detect/segment decoder's feed-forward width.
        pose_layers, pose_ffn: the pose decoder's depth and feed-forward width.
    """

    vit_width: int
    vit_heads: int
    proj_dim: int | None
    hidden: int
    encoder_ffn: int
    expansion: float
    depth_mult: float
    decoder_ffn: int
    pose_layers: int
    pose_ffn: int
    vit_ffn_ratio: float = 4.0


VARIANTS: dict[str, Variant] = {
    "s": Variant(192, 3, None, 192, 512, 0.34, 0.67, 512, 3, 512),
    "m": Variant(256, 4, None, 256, 512, 0.75, 0.67, 1024, 4, 512),
    "l": Variant(384, 6, 256, 256, 1024, 0.75, 1.0, 1024, 6, 1024),
    "x": Variant(384, 6, 256, 256, 2048, 1.5, 1.0, 2048, 6, 2048, vit_ffn_ratio=6.0),
}

TASKS = ("detect", "segment", "pose")

# Shared by every size (upstream's build): the ViT's last two layers (10, 11) averaged into a
# stride-16 map, resampled to strides 8, 16, 32; the encoder's transformer layer on stride 32 only
# (8 heads); a 4-layer decoder with 8 heads sampling 3, 6, 3 points on the three levels, 300
# queries, 32-bin distance distributions (FDR) with reg_scale 4; up to 100 denoising queries.
# Pose: 60 queries, 2 classes (person, background), 17 keypoints, 4 points per level.
PATCH = 16
VIT_DEPTH = 12
READ_LAYERS = (10, 11)
STRIDES = (8, 16, 32)
ENCODER_HEADS = 8
DECODER_HEADS = 8
DECODER_LAYERS = 4
DECODER_POINTS = (3, 6, 3)
NUM_QUERIES = 300
REG_MAX = 32
REG_SCALE = 4.0
NUM_DENOISING = 100
LABEL_NOISE_RATIO = 0.5
BOX_NOISE_SCALE = 1.0
POSE_QUERIES = 60
POSE_CLASSES = 2
POSE_POINTS = 4
KEYPOINTS = 17


def variant(size: str) -> Variant:
    """The size's variant; ValueError naming the sizes."""
    if size not in VARIANTS:
        raise ValueError(f"EC has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return VARIANTS[size]
