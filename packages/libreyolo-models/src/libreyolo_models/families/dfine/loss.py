"""D-FINE's loss: varifocal classification (alpha 0.75, gamma 2), L1 and GIoU on the union of all
prediction sets' matches, fine-grained localisation and decoupled distillation over the
distribution bins (``layers.detr.fdr_loss``), matched by the Hungarian matcher (costs 2, 5, 2)."""

from __future__ import annotations

from collections.abc import Mapping

from ...layers.detr.fdr_loss import FDRLoss

LOSS_NAMES = ("vfl", "bbox", "giou", "fgl", "ddf")
LOSS_GAINS = {"vfl": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5}


def make_loss(nc: int, gains: Mapping[str, float]) -> FDRLoss:
    return FDRLoss(nc, gains, cls_term="vfl", alpha=0.75, gamma=2.0)
