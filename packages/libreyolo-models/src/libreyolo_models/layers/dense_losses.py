"""Element-wise loss terms of dense (anchor-point) detectors with quality targets: varifocal loss for
classification, distribution focal loss for box-side distributions.

Both return per-element losses (no reduction): each family weights, sums and normalises them its
own way (by positive count, by the sum of soft targets, across ranks; see ``layers.loss_scale``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def varifocal_loss(logits: Tensor, target: Tensor, positive: Tensor, *, alpha: float = 0.75,
                   gamma: float = 2.0) -> Tensor:
    """Varifocal loss (VarifocalNet, Zhang et al. 2021), element-wise, same shape as ``logits``.

    Binary cross-entropy against a soft target, reweighted asymmetrically: a positive element
    (the assigned class of a positive anchor) weighs its own target score, so well-localised
    positives count most; every other element weighs ``alpha * |p - target| ** gamma`` (its
    target is 0 there), so easy negatives fade out as in focal loss. The weight is not detached:
    PP-YOLOE, YOLO-NAS and PicoDet all let the gradient through it.

    Args:
        logits: class logits, any shape.
        target: soft targets in [0, 1] (IoU-aware quality on positives, 0 elsewhere).
        positive: bool mask of the positive elements, broadcastable to ``logits``.
    """
    prob = logits.sigmoid()
    weight = positive * target + (~positive) * (alpha * (prob - target).abs().pow(gamma))
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none") * weight


def quality_focal_loss(logits: Tensor, target: Tensor, *, gamma: float = 2.0) -> Tensor:
    """Quality focal loss (GFL, Li et al. 2020), element-wise: binary cross-entropy against a soft
    target in [0, 1], weighted ``|p - target| ** gamma`` for every element alike, so elements
    already near their target fade out (focal loss's modulating factor, for soft targets).

    Args:
        logits: logits, any shape.
        target: targets in [0, 1], broadcastable to ``logits`` (a hard 0/1 target gives focal loss
            without its alpha balance).
    """
    weight = (logits.sigmoid() - target).abs().pow(gamma)
    return F.binary_cross_entropy_with_logits(logits, target.expand_as(logits), reduction="none") * weight


def distribution_focal_loss(logits: Tensor, target: Tensor) -> Tensor:
    """Distribution focal loss (GFL, Li et al. 2020): ``[..., bins]`` logits and ``[...]`` continuous
    targets in bin units -> ``[...]``.

    A target t between bins ``floor(t)`` and ``floor(t) + 1`` asks for probability mass on those two,
    in proportion to closeness: the cross-entropy of both, weighted ``(floor(t) + 1 - t)`` and
    ``(t - floor(t))``. Targets must lie in ``[0, bins - 1)`` (clamp them just below the last bin).
    """
    log_probs = logits.log_softmax(-1)
    lower = target.long()
    upper_weight = target - lower
    lower_logp = log_probs.gather(-1, lower[..., None]).squeeze(-1)
    upper_logp = log_probs.gather(-1, (lower + 1)[..., None]).squeeze(-1)
    return -(lower_logp * (1.0 - upper_weight) + upper_logp * upper_weight)
