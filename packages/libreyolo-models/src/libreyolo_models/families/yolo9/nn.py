"""The YOLOv9 (GELAN) detection network: tensors in, tensors out.

No NMS, no ``.item()``, no I/O and no data-dependent shapes: this module is exactly what a CUDA
graph captures. It returns the same dict in train and eval mode; the caller decides what comes
next (loss on ``raw_outputs``, post-processing on ``predictions``).

The trunk (``layers.gelan_net``) and the head (``layers.dfl_head``) are shared with YOLOv9-E2E.
State-dict keys (``backbone.``, ``neck.``, ``head.`` and everything below) match upstream
LibreYOLO checkpoints with no remapping; ``tests/test_yolo9_upstream_compat.py`` pins them.
"""

from __future__ import annotations

from torch import Tensor, nn

from ...layers.dfl_head import DetectHead
from ...layers.gelan_net import GELAN_ARCHS, GelanBackbone, GelanNeck


class Yolo9Net(nn.Module):
    """YOLOv9 detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then class scores after
        sigmoid; anchors row-major per level, levels in stride order 8, 16, 32.
        ``raw_outputs`` list of ``[B, 4*16 + nc, H/s, W/s]``: box-distribution logits (l, t, r, b
        x 16 bins) then class logits; what the loss reads.
        ``x8``/``x16``/``x32`` ``{"features": Tensor}``: the neck outputs fed to the head.
    """

    def __init__(self, size: str = "t", nc: int = 80) -> None:
        super().__init__()
        if size not in GELAN_ARCHS:
            raise ValueError(f"unknown YOLOv9 size {size!r}; known sizes: {', '.join(GELAN_ARCHS)}")
        arch = GELAN_ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = GelanBackbone(arch)
        self.neck = GelanNeck(arch)
        self.head = DetectHead(nc, arch.head_channels)
        self.head.initialize_biases()

    def raw_outputs(self, x: Tensor) -> list[Tensor]:
        """Only what the loss reads (the training graph seam): the three raw head maps."""
        return self.head.raw_maps(self.neck(*self.backbone(x)))

    def forward(self, x: Tensor) -> dict[str, object]:
        f8, f16, f32 = self.neck(*self.backbone(x))
        predictions, raw = self.head((f8, f16, f32))
        return {"predictions": predictions, "raw_outputs": raw,
                "x8": {"features": f8}, "x16": {"features": f16}, "x32": {"features": f32}}
