"""RT-DETRv4's network: the D-FINE architecture of ``layers.detr.dfine_net`` with upstream's
RT-DETRv4 settings (D-FINE's model built with SiLU activations, the stem frozen). Same layout as
D-FINE s/m/l/x; raw upstream checkpoints also carry ``encoder.feature_projector.*`` (used only to
distil from a vision foundation model while training), which ``remap_state`` drops."""

from __future__ import annotations

from ...layers.detr.dfine_net import DFINENet

SIZES = ("s", "m", "l", "x")


def build_network(size: str, nc: int, imgsz: tuple[int, int]) -> DFINENet:
    """RT-DETRv4 ``size`` for ``nc`` classes, its anchor buffers built for ``imgsz`` (H, W)."""
    if size not in SIZES:
        raise ValueError(f"RT-DETRv4 has no size {size!r}; sizes: {', '.join(SIZES)}")
    return DFINENet(size, nc, act="silu", freeze_stem=True, imgsz=imgsz)
