"""A detection batch's ground truths as padded per-image tensors on the loss's device.

Every dense detection loss starts the same way: the collate's flat rows (image index, class, box)
are checked while still on the host, grouped by image into a padded ``[B, G, ...]`` layout with a
mask, and moved to the device in one transfer. Kept in one place so that the checks, the padding
width rule (see ``assign.pad_targets``) and the pinned, non-blocking copy cannot drift apart
between families.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from .assign import pad_targets

log = logging.getLogger(__name__)
_logged_device_targets = False


@dataclass(frozen=True)
class GroundTruths:
    """Padded ground truths of ``B`` images, ``G`` columns each.

    Attributes:
        labels: ``[B, G]`` int64 classes (padding columns hold 0).
        boxes: ``[B, G, 4]`` centre x, centre y, width, height in input pixels.
        mask: ``[B, G]`` bool, False on padding columns.
    """

    labels: Tensor
    boxes: Tensor
    mask: Tensor


def padded_ground_truths(targets: Tensor, batch: int, image_hw: tuple[int, int], device: torch.device, *,
                         nc: int) -> GroundTruths:
    """Check, pad and move ``targets`` for a loss over ``batch`` images of ``image_hw`` pixels.

    Args:
        targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalized to [0, 1];
            M may be 0. On the CPU (as the DataLoader yields them) the rows are checked and the
            padding is sized from the data; on a GPU they are padded to M columns per image
            instead, so that no count is read back.
        batch: images in the batch.
        image_hw: input height and width in pixels (the boxes' normalisation).
        device: where the loss runs.
        nc: the model's class count (classes must be integers in ``[0, nc)``).

    Raises:
        ValueError: the rows have the wrong layout, or (CPU only) a class or image index is out
            of range; the message names the row.
    """
    global _logged_device_targets
    if targets.numel() == 0:
        targets = targets.reshape(0, 6)
    if targets.dim() != 2 or targets.shape[1] != 6:
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected [M, 6] rows of "
                         "(image index, class, cx, cy, w, h) with normalized boxes")
    if targets.device.type == "cpu":
        check_classes(targets, nc)
    elif not _logged_device_targets:
        _logged_device_targets = True
        log.debug("targets on %s: padding to M=%d columns per image; pass CPU targets to pad to the "
                  "per-image maximum", targets.device, targets.shape[0])
    padded, mask = pad_targets(targets.float(), batch)
    packed = torch.cat((padded, mask[..., None].float()), -1)  # one transfer for both
    if packed.device != device:
        if device.type == "cuda":
            packed = packed.pin_memory()  # a pageable source would make the copy wait for the GPU
        packed = packed.to(device, non_blocking=device.type == "cuda")
    height, width = image_hw
    # Python scalars, not a tensor of them: nothing is copied from the host.
    boxes = torch.stack((packed[..., 1] * width, packed[..., 2] * height, packed[..., 3] * width,
                         packed[..., 4] * height), -1)
    return GroundTruths(packed[..., 0].long(), boxes, packed[..., 5] > 0.5)


def check_classes(targets: Tensor, nc: int) -> None:
    """Reject class ids outside [0, nc) while the rows are still on the host (free to read)."""
    classes = targets[:, 1]
    bad = (classes < 0) | (classes >= nc) | (classes != classes.floor())
    if bad.any():
        row = int(bad.long().argmax())
        raise ValueError(f"targets row {row} has class {float(classes[row]):g} but nc={nc}; "
                         f"classes must be integers in [0, {nc}): check the labels or nc")
