"""DEIM's loss: D-FINE's (``layers.detr.fdr_loss``) with the matchability-aware classification
term (MAL, gamma 1.5) in place of varifocal: a matched query's target is ``IoU**1.5``, so the
many low-IoU matches dense one-to-one matching brings are neither forced to full confidence nor
ignored."""

from __future__ import annotations

from collections.abc import Mapping

from ...layers.detr.fdr_loss import FDRLoss

LOSS_GAINS = {"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5}


def make_loss(nc: int, gains: Mapping[str, float]) -> FDRLoss:
    return FDRLoss(nc, gains, cls_term="mal", alpha=0.75, gamma=1.5)
