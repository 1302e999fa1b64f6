"""SegFormer's loss: per-pixel cross-entropy at the mask's resolution, ignore pixels left out."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from ...contract.targets import IGNORE_INDEX


def pixel_cross_entropy(logits: Tensor, masks: Tensor, *, world_size: int = 1,
                        normalizer_sum: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Mean cross-entropy over every labelled pixel of the global batch.

    The logits are upsampled (bilinear) to the masks' size first, as published: the network
    predicts at 1/4 resolution, the labels are full size. The mean is over labelled pixels of all
    ranks (``normalizer_sum`` adds the rank-local counts, called exactly once), times
    ``world_size`` because DDP averages gradients: two ranks at batch b/2 give the loss and the
    gradients of one rank at batch b, however unevenly ignore pixels fall between them.

    Args:
        logits: ``float [B, nc, h, w]``.
        masks: ``uint8`` or ``int64 [B, H, W]`` class ids, ``IGNORE_INDEX`` for unlabelled pixels.
        world_size: ranks whose gradients DDP averages.
        normalizer_sum: all-reduce sum of a 0-d tensor over ranks; None in one process.

    Returns:
        A 0-d float32 tensor (0 when no pixel of the global batch is labelled).
    """
    masks = masks.to(logits.device, non_blocking=True).long()
    if logits.shape[-2:] != masks.shape[-2:]:
        logits = F.interpolate(logits.float(), size=masks.shape[-2:], mode="bilinear", align_corners=False)
    total = F.cross_entropy(logits.float(), masks, ignore_index=IGNORE_INDEX, reduction="sum")
    labelled = (masks != IGNORE_INDEX).sum().float()
    if normalizer_sum is not None:
        labelled = normalizer_sum(labelled)
    return total * world_size / labelled.clamp(min=1.0)
