"""RT-DETRv2's network: ``layers.detr.rtdetr_net`` in the v2 layout (``enc_output.proj``/``.norm``,
persistent ``num_points_scale``, ``anchors`` and ``valid_mask``), upstream's ``RTDETRv2Model``.
Upstream ships v2 only with ResNet-vd backbones (its HGNetv2 sizes are RT-DETR l/x)."""

from __future__ import annotations

from ...layers.detr.rtdetr_net import RTDETRNet

SIZES = ("r18", "r34", "r50", "r50m", "r101")


def build_network(size: str, nc: int, imgsz: tuple[int, int]) -> RTDETRNet:
    """RT-DETRv2 ``size`` for ``nc`` classes, its anchor buffers built for ``imgsz`` (H, W)."""
    if size not in SIZES:
        raise ValueError(f"RT-DETRv2 has no size {size!r}; sizes: {', '.join(SIZES)}")
    return RTDETRNet(size, nc, v2_layout=True, imgsz=imgsz)
