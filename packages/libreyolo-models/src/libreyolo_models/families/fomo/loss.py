"""FOMO's loss: per-cell cross-entropy over background and the classes, object cells weighted up.

The target map gives every cell the class of the object whose centre falls in it (1-based; 0:
background); where two centres share a cell, the later label wins. Objects cover a few cells of
hundreds, so the published recipe weighs object cells ``object_weight`` (100) times the
background's. Here the two halves are separate terms, ``obj`` (the cross-entropy summed over object
cells) and ``bg`` (over background cells), each divided by the batch's cell count, so the weight is
the ratio of their gains (``gains=obj:50`` changes it) and both are logged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def target_map(targets: Tensor, batch: int, height: int, width: int, device: torch.device) -> Tensor:
    """``int64 [batch, height, width]`` cell labels from ``[M, 4]`` rows (image, class, x, y), points
    normalised to the input: 0 for background, ``class + 1`` in the cell holding each point."""
    labels = torch.zeros((batch, height, width), dtype=torch.int64, device=device)
    if targets.numel() == 0:
        return labels
    rows = targets.to(device, non_blocking=True).float()
    image = rows[:, 0].long()
    col = (rows[:, 2] * width).floor().long().clamp(0, width - 1)
    row = (rows[:, 3] * height).floor().long().clamp(0, height - 1)
    labels[image, row, col] = rows[:, 1].long() + 1
    return labels


def fomo_loss(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(obj, bg)``: the cross-entropy summed over object and over background cells, each divided
    by the number of cells. ``logits`` ``[B, nc + 1, h, w]``, ``labels`` ``int64 [B, h, w]``."""
    ce = F.cross_entropy(logits.float(), labels, reduction="none")
    is_object = labels > 0
    cells = float(labels.numel())
    return (ce * is_object).sum() / cells, (ce * ~is_object).sum() / cells
