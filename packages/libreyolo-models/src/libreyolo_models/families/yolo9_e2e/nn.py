"""The YOLOv9-E2E (NMS-free) detection network: YOLOv9's GELAN trunk and a dual head.

The head keeps YOLOv9's one-to-many branches (``cv2`` box, ``cv3`` class), trained with ten
candidates per object as in YOLOv9, and adds a one-to-one pair (``one2one_cv2``/``one2one_cv3``)
trained with one candidate per object, so that each object ends up with a single confident
prediction and inference needs a top-k instead of NMS. Only the one-to-one pair runs in
inference; the one-to-many pair exists for training (it gives the trunk its dense gradient) and is
stored in checkpoints like upstream's.

No NMS, no ``.item()``, no data-dependent shapes: this module is what a CUDA graph captures.
State-dict keys match upstream LibreYOLO's ``LibreYOLO9E2EModel`` (``tests/test_yolo9_e2e_*``).
"""

from __future__ import annotations

from torch import Tensor, nn

from ...layers.dfl_head import (
    REG_MAX,
    DetectHead,
    box_branches,
    branch_maps,
    class_branches,
    initialize_branch_biases,
)
from ...layers.gelan_net import GELAN_ARCHS, GelanBackbone, GelanNeck


class DualDetectHead(DetectHead):
    """YOLOv9's head (``cv2``/``cv3``) plus the one-to-one branches, built the same way and
    started from the same weights (as upstream does), in that state-dict order."""

    def __init__(self, nc: int, channels: tuple[int, ...], reg_max: int = REG_MAX) -> None:
        super().__init__(nc, channels, reg_max)
        self.one2one_cv2 = box_branches(channels, self.c_box, reg_max)
        self.one2one_cv3 = class_branches(channels, self.c_cls, nc)

    def initialize_biases(self, imgsz: int = 640) -> None:
        """Both pairs start at YOLOv9's priors, the one-to-one pair as a copy of the dense one."""
        super().initialize_biases(imgsz)
        self.one2one_cv2.load_state_dict(self.cv2.state_dict())
        self.one2one_cv3.load_state_dict(self.cv3.state_dict())
        initialize_branch_biases(self.one2one_cv2, self.one2one_cv3, self.nc, imgsz)

    def one2one_maps(self, feats: tuple[Tensor, ...]) -> list[Tensor]:
        """Per level ``[B, 4*reg_max + nc, H, W]`` from the one-to-one branches."""
        return branch_maps(feats, self.one2one_cv2, self.one2one_cv3)


class Yolo9E2ENet(nn.Module):
    """YOLOv9-E2E detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32 (upstream's convention
    too, so there is no ``upstream_outputs``: ``forward`` is upstream's eval forward).
    Output dict (same in train and eval mode), from the one-to-one branches:
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then class scores after
        sigmoid; anchors row-major per level, levels in stride order 8, 16, 32.
        ``raw_outputs`` list of ``[B, 4*16 + nc, H/s, W/s]``: distance logits then class logits.
        ``x8``/``x16``/``x32`` ``{"features": Tensor}``: the neck outputs fed to the head.
    """

    def __init__(self, size: str = "t", nc: int = 80) -> None:
        super().__init__()
        if size not in GELAN_ARCHS:
            raise ValueError(f"unknown YOLOv9-E2E size {size!r}; known sizes: {', '.join(GELAN_ARCHS)}")
        arch = GELAN_ARCHS[size]
        self.size, self.nc = size, nc
        self.backbone = GelanBackbone(arch)
        self.neck = GelanNeck(arch)
        self.head = DualDetectHead(nc, arch.head_channels)
        self.head.initialize_biases()

    def training_outputs(self, x: Tensor) -> dict[str, list[Tensor]]:
        """The training seam: both branches' raw maps. The one-to-one branch reads detached
        features (as upstream): its single-positive loss trains its own convolutions only, and
        the trunk learns from the dense branch alone."""
        feats = self.neck(*self.backbone(x))
        return {"one2many": self.head.raw_maps(feats),
                "one2one": self.head.one2one_maps(tuple(f.detach() for f in feats))}

    def forward(self, x: Tensor) -> dict[str, object]:
        f8, f16, f32 = self.neck(*self.backbone(x))
        raw = self.head.one2one_maps((f8, f16, f32))
        return {"predictions": self.head.decode(raw), "raw_outputs": raw,
                "x8": {"features": f8}, "x16": {"features": f16}, "x32": {"features": f32}}
