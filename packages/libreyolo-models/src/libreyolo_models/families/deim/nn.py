"""DEIM's network: the D-FINE architecture of ``layers.detr.dfine_net`` with upstream's DEIM
settings (SiLU decoder activations and heads; nothing frozen). Same state-dict layout as D-FINE."""

from __future__ import annotations

from ...layers.detr.dfine_net import DFINENet


def build_network(size: str, nc: int, imgsz: tuple[int, int]) -> DFINENet:
    """DEIM ``size`` for ``nc`` classes, its anchor buffers built for ``imgsz`` (H, W)."""
    return DFINENet(size, nc, act="silu", freeze_stem=False, imgsz=imgsz)
