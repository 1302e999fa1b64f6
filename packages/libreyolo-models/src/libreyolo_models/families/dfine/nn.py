"""D-FINE's network: the D-FINE architecture of ``layers.detr.dfine_net`` with upstream's D-FINE
settings (ReLU decoder activations; the backbone stem frozen, as upstream builds it for a
pretrained backbone). Keys ``backbone.``, ``encoder.``, ``decoder.``: upstream's ``LibreDFINEModel``."""

from __future__ import annotations

from ...layers.detr.dfine_net import SIZES, DFINENet

__all__ = ["SIZES", "build_network"]


def build_network(size: str, nc: int, imgsz: tuple[int, int]) -> DFINENet:
    """D-FINE ``size`` for ``nc`` classes, its anchor buffers built for ``imgsz`` (H, W)."""
    return DFINENet(size, nc, act="relu", freeze_stem=True, imgsz=imgsz)
