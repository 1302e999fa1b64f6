"""Detection targets as a batched assigner reads them: padded per image, in pixels, on the device.

The collate yields flat CPU rows ``[M, 6]`` (image index, class, cx, cy, w, h; boxes normalised);
assigners work on whole padded batches (``[B, G, ...]`` plus a mask) so they need no loop over
images and no host round trip. Shared by every dense detector's loss.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from .assign import pad_targets
from .boxes import xywh_to_xyxy

log = logging.getLogger(__name__)


class GroundTruthPacker:
    """Flat target rows -> padded ground truths; one per loss (it remembers what it has logged).

    Args:
        nc: number of classes; CPU rows are checked against it.
    """

    def __init__(self, nc: int) -> None:
        self.nc = nc
        self._logged_device_targets = False

    def __call__(self, targets: Tensor, batch: int, image_hw: tuple[int, int],
                 device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ground truths on ``device``: labels ``[B, G]`` int64, xyxy pixel boxes ``[B, G, 4]``
        float32, mask ``[B, G]`` bool (False on padding).

        Args:
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised to the
                ``image_hw`` (height, width) input; M may be 0. On the CPU (as the DataLoader
                yields them) the padding is sized from the data and the classes are checked, at
                no device cost; on a GPU they are padded to M columns per image instead, so that
                no count is read back.

        Raises:
            ValueError: the rows are not ``[M, 6]``, or (CPU rows) a class is outside ``[0, nc)``.
        """
        if targets.numel() == 0:
            targets = targets.reshape(0, 6)
        if targets.dim() != 2 or targets.shape[1] != 6:
            raise ValueError(f"targets has shape {tuple(targets.shape)}; expected [M, 6] rows of "
                             "(image index, class, cx, cy, w, h) with normalized boxes")
        if targets.device.type == "cpu":
            self._check_classes(targets)
        elif not self._logged_device_targets:
            self._logged_device_targets = True
            log.debug("targets on %s: padding to M=%d columns per image; pass CPU targets to pad to the "
                      "per-image maximum", targets.device, targets.shape[0])
        padded, mask = pad_targets(targets.float(), batch)
        packed = torch.cat((padded, mask[..., None].float()), -1)  # one transfer for both
        if packed.device != device:
            if device.type == "cuda":
                packed = packed.pin_memory()  # a pageable source would make the copy wait for the GPU
            packed = packed.to(device, non_blocking=device.type == "cuda")
        height, width = image_hw
        cx, cy, w, h = packed[..., 1] * width, packed[..., 2] * height, packed[..., 3] * width, packed[..., 4] * height
        boxes = xywh_to_xyxy(torch.stack((cx, cy, w, h), -1))
        return packed[..., 0].long(), boxes, packed[..., 5] > 0.5

    def _check_classes(self, targets: Tensor) -> None:
        """Reject class ids outside [0, nc) while the rows are still on the host (free to read)."""
        classes = targets[:, 1]
        bad = (classes < 0) | (classes >= self.nc) | (classes != classes.floor())
        if bad.any():
            row = int(bad.long().argmax())
            raise ValueError(f"targets row {row} has class {float(classes[row]):g} but nc={self.nc}; "
                             f"classes must be integers in [0, {self.nc}): check the labels or nc")
