"""The detect task's flat target rows regrouped per image, on the host, for set matching.

A set predictor's matcher, its denoising queries and its loss all index ground truths as "image
b's j-th box"; this one grouping (a stable sort by image) defines that order for all of them, so
they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class GroupedTargets:
    """Ground truths of a batch, sorted by image (stable: each image keeps its row order).

    Attributes:
        labels: ``int64 [M]`` class ids, on the CPU.
        boxes: ``float32 [M, 4]`` cx, cy, w, h normalised to the input, on the CPU.
        counts: boxes per image, ``len == batch``.
    """

    labels: Tensor
    boxes: Tensor
    counts: tuple[int, ...]

    @property
    def batch(self) -> int:
        return len(self.counts)

    @property
    def total(self) -> int:
        return int(self.labels.shape[0])

    @property
    def max_count(self) -> int:
        return max(self.counts, default=0)

    def offsets(self) -> list[int]:
        """Row of each image's first box in ``labels`` / ``boxes``."""
        out, start = [], 0
        for n in self.counts:
            out.append(start)
            start += n
        return out

    def padded_rows(self) -> Tensor:
        """``int64 [B, max(G, 1)]``: per image, its rows of ``labels`` / ``boxes`` (padding: row 0),
        to gather per-image ground truths (masks, keypoints) kept in this order."""
        rows = torch.zeros(self.batch, max(self.max_count, 1), dtype=torch.int64)
        for b, (start, n) in enumerate(zip(self.offsets(), self.counts)):
            rows[b, :n] = torch.arange(start, start + n)
        return rows

    def padded(self, pad_label: int) -> tuple[Tensor, Tensor, Tensor]:
        """``labels [B, G]`` (``pad_label`` on padding), ``boxes [B, G, 4]`` (zeros on padding) and
        ``mask [B, G]`` with ``G = max_count``."""
        g = self.max_count
        labels = torch.full((self.batch, g), pad_label, dtype=torch.int64)
        boxes = torch.zeros(self.batch, g, 4)
        mask = torch.zeros(self.batch, g, dtype=torch.bool)
        for b, (start, n) in enumerate(zip(self.offsets(), self.counts)):
            labels[b, :n] = self.labels[start:start + n]
            boxes[b, :n] = self.boxes[start:start + n]
            mask[b, :n] = True
        return labels, boxes, mask


def group_targets(targets: Tensor, batch: int, nc: int) -> GroupedTargets:
    """``[M, 6]`` rows (image, class, cx, cy, w, h) -> :class:`GroupedTargets` on the CPU.

    Raises:
        ValueError: the layout is wrong, or a row names an image outside ``[0, batch)`` or a class
            outside ``[0, nc)`` (the message gives the row).
    """
    if targets.dim() != 2 or targets.shape[1] != 6:
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected [M, 6] rows "
                         "(image, class, cx, cy, w, h) with boxes normalised to the input")
    rows = targets.detach().float().cpu()
    image, labels = rows[:, 0].long(), rows[:, 1].long()
    for name, values, limit in (("image index", image, batch), ("class", labels, nc)):
        bad = (values < 0) | (values >= limit)
        if bad.any():
            row = int(bad.long().argmax())
            raise ValueError(f"targets row {row} has {name} {int(values[row])}, outside [0, {limit}); "
                             f"check the labels (the model has {nc} classes, the batch {batch} images)")
    order = torch.sort(image, stable=True).indices
    counts = torch.bincount(image, minlength=batch).tolist()
    return GroupedTargets(labels[order], rows[order, 2:6].contiguous(), tuple(int(n) for n in counts))
