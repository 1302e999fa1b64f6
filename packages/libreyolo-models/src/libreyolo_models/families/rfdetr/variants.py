"""RF-DETR's sizes as data, per task: the ViT's patch and window grid, the decoder's depth, the
query count and the position-embedding table the backbone was trained with.

Values follow upstream LibreYOLO's size tables (themselves Roboflow's released configs), so every
size's state dict matches upstream's manifest key for key. No torch import: ``spec.py`` reads the
size names and default image sizes from here cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One size of RF-DETR for one task.

    Attributes:
        patch: the ViT's patch side in pixels (16 for detect and pose, 12 for segment).
        windows: windows per side of the windowed attention layers (``windows**2`` windows).
        decoder_layers: LW-DETR decoder layers.
        resolution: the image side the size was trained at (its default ``imgsz``).
        pe_size: side of the learned position-embedding grid (``pe_size**2 + 1`` rows with the
            class token's); other image sizes interpolate it, as DINOv2 does.
        queries: object queries at inference (per group in training).
    """

    patch: int
    windows: int
    decoder_layers: int
    resolution: int
    pe_size: int
    queries: int = 300

    @property
    def block(self) -> int:
        """Image sides must be multiples of this: whole patches in whole windows."""
        return self.patch * self.windows


DETECT: dict[str, Variant] = {
    "n": Variant(16, 2, 2, 384, 24),
    "s": Variant(16, 2, 3, 512, 32),
    "m": Variant(16, 2, 4, 576, 36),
    "l": Variant(16, 2, 4, 704, 44),
}

# Upstream builds pose on the detect table (with one class and a keypoint head).
POSE: dict[str, Variant] = dict(DETECT)

SEGMENT: dict[str, Variant] = {
    "n": Variant(12, 1, 4, 312, 26, queries=100),
    "s": Variant(12, 2, 4, 384, 32, queries=100),
    "m": Variant(12, 2, 5, 432, 36, queries=200),
    "l": Variant(12, 2, 5, 504, 42, queries=200),
    "x": Variant(12, 2, 6, 624, 52, queries=300),
    "xx": Variant(12, 2, 6, 768, 64, queries=300),
}

VARIANTS: dict[str, dict[str, Variant]] = {"detect": DETECT, "pose": POSE, "segment": SEGMENT}

# Shared by every size and task (upstream's build arguments): a DINOv2-small encoder (384 wide, 12
# layers, 6 heads) read after layers 3, 6, 9 and 12, whose other layers attend inside windows; one
# projector level (P4, stride = patch); a 256-wide decoder with 8 self-attention heads and 16
# deformable heads sampling 2 points; 13 query groups in training (Group DETR).
VIT_WIDTH = 384
VIT_DEPTH = 12
VIT_HEADS = 6
OUT_LAYERS = (3, 6, 9, 12)
HIDDEN = 256
FFN = 2048
SELF_HEADS = 8
CROSS_HEADS = 16
CROSS_POINTS = 2
GROUPS = 13
KEYPOINTS = 17


def variant(size: str, task: str = "detect") -> Variant:
    """The size's variant for ``task``; ValueError naming the sizes the task has."""
    table = VARIANTS.get(task)
    if table is None:
        raise ValueError(f"RF-DETR has no task {task!r}; tasks: {', '.join(VARIANTS)}")
    if size not in table:
        raise ValueError(f"RF-DETR {task} has no size {size!r}; sizes: {', '.join(table)}")
    return table[size]
