"""RT-DETRv2's loss: RT-DETR's (upstream trains v2 with RT-DETR's trainer): varifocal, L1 and GIoU
over every decoder layer, the encoder's top-k and the denoising queries (``layers.detr.set_loss``)."""

from __future__ import annotations

from collections.abc import Mapping

from ...layers.detr.set_loss import RTDETRLoss


def make_loss(nc: int, gains: Mapping[str, float]) -> RTDETRLoss:
    return RTDETRLoss(nc, gains)
