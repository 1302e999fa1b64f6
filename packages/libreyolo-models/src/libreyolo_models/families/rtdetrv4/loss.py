"""RT-DETRv4's loss: upstream trains it with DEIM's trainer, so DEIM's loss (MAL, gamma 1.5, and
D-FINE's box, FGL and DDF terms; ``layers.detr.fdr_loss``). The teacher-feature distillation of
the official recipe needs the foundation model and is not part of upstream LibreYOLO's."""

from __future__ import annotations

from collections.abc import Mapping

from ...layers.detr.fdr_loss import FDRLoss


def make_loss(nc: int, gains: Mapping[str, float]) -> FDRLoss:
    return FDRLoss(nc, gains, cls_term="mal", alpha=0.75, gamma=1.5)
