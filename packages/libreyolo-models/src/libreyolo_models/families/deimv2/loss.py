"""DEIMv2's loss: DEIM's (MAL, box terms, FGL/DDF over the distribution bins; ``layers.detr.fdr_loss``)
with two per-size controls from upstream's recipes: atto/femto/pico train without FGL/DDF and
without the union of matches, and late in every run matching ranks by ``-p * IoU**4``."""

from __future__ import annotations

from collections.abc import Mapping

from ...layers.detr.fdr_loss import FDRLoss
from .sizes import SIZES


def make_loss(nc: int, size: str, gains: Mapping[str, float]) -> FDRLoss:
    v = SIZES[size]
    return FDRLoss(nc, gains, cls_term="mal", alpha=0.75, gamma=1.5, local=not v.small, union=not v.small,
                   iou_order_from=v.matcher_switch)
