"""Contrastive denoising groups: noised copies of the ground truth fed to the decoder as extra
queries, whose correct answer is known without matching (training only, built on the host).

Each group holds every ground-truth box twice: a *positive* copy, jittered within half its size
(the decoder must recover the box and class), and a *negative* copy jittered further (it must
predict "no object"). Some labels are flipped to a random class. Groups repeat until about
``num_denoising`` queries are used. An attention mask keeps groups from seeing each other and the
matching queries from seeing any group, so the matching part computes exactly what it would
without denoising. Why: Hungarian matching is unstable early in training; these queries give
every layer a stable, dense box-regression signal.

The number of groups depends on the batch's largest box count, so the decoder's token count
changes from batch to batch: why a CUDA graph cannot hold the decoder during training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..boxes import xywh_to_xyxy, xyxy_to_xywh
from ..set_targets import GroupedTargets
from .anchors import inverse_sigmoid


@dataclass(frozen=True)
class DenoisingQueries:
    """The denoising part of one training batch.

    Attributes:
        labels: ``int64 [B, D]`` noised classes; ``nc`` (the embedding's padding row) on slots of
            images with fewer boxes than the batch's largest count.
        boxes_unact: ``[B, D, 4]`` noised cx, cy, w, h in logit space (the decoder's references).
        attn_mask: ``bool [D + Q, D + Q]`` for the decoder's self-attention, True where a query may
            not look; None when ``D == 0``.
        groups: number of groups; max_boxes: the batch's largest per-image box count;
        counts: boxes per image.
    """

    labels: Tensor
    boxes_unact: Tensor
    attn_mask: Tensor | None
    groups: int
    max_boxes: int
    counts: tuple[int, ...]

    @property
    def num_queries(self) -> int:
        """D: ``2 * max_boxes * groups`` (0 without boxes)."""
        return 2 * self.max_boxes * self.groups

    def positive_slots(self, image: int) -> Tensor:
        """``int64 [groups * n]``: the slots of image ``image``'s positive copies, group-major, so
        slot ``k`` answers ground truth ``k % n`` (``n`` = that image's box count)."""
        n = self.counts[image]
        starts = torch.arange(self.groups) * 2 * self.max_boxes
        return (starts[:, None] + torch.arange(n)[None]).flatten()

    def to(self, device: torch.device) -> DenoisingQueries:
        mask = self.attn_mask.to(device, non_blocking=True) if self.attn_mask is not None else None
        return DenoisingQueries(self.labels.to(device, non_blocking=True),
                                self.boxes_unact.to(device, non_blocking=True), mask, self.groups,
                                self.max_boxes, self.counts)


def build_denoising(targets: GroupedTargets, nc: int, num_queries: int, *, num_denoising: int = 100,
                    label_noise_ratio: float = 0.5, box_noise_scale: float = 1.0, abs_sizes: bool = False,
                    generator: torch.Generator | None = None) -> DenoisingQueries:
    """The denoising queries of a batch (CPU tensors; see the module docstring).

    Args:
        targets: the batch's ground truths, grouped per image.
        nc: classes (also the padding label).
        num_queries: the matching queries (Q) that follow the denoising ones.
        num_denoising: about how many denoising queries to use: ``num_denoising // max_boxes``
            groups, at least one.
        label_noise_ratio: a label is replaced by a random class with probability half this.
        box_noise_scale: corners move by up to this many half-extents (positives by less than
            one, negatives between one and two).
        abs_sizes: a box whose noised corners crossed keeps a positive width/height (D-FINE's
            families); RT-DETR leaves it negative (its logit then clamps to the border).
        generator: the random source (default: torch's global CPU generator).
    """
    b, most = targets.batch, targets.max_count
    if most == 0 or num_denoising <= 0:
        return DenoisingQueries(torch.zeros(b, 0, dtype=torch.int64), torch.zeros(b, 0, 4), None, 0, 0,
                                targets.counts)
    groups = max(num_denoising // most, 1)
    labels, boxes, present = targets.padded(pad_label=nc)
    labels, boxes, present = labels.repeat(1, 2 * groups), boxes.repeat(1, 2 * groups, 1), present.repeat(1, 2 * groups)
    negative = torch.zeros(b, 2 * most, 1)
    negative[:, most:] = 1.0
    negative = negative.repeat(1, groups, 1)
    d = 2 * most * groups
    if label_noise_ratio > 0:
        flip = torch.rand(b, d, generator=generator) < label_noise_ratio * 0.5
        random_labels = torch.randint(0, nc, (b, d), generator=generator)
        labels = torch.where(flip & present, random_labels, labels)
    if box_noise_scale > 0:
        corners = xywh_to_xyxy(boxes)
        half = boxes[..., 2:].repeat(1, 1, 2) * 0.5 * box_noise_scale
        sign = torch.randint(0, 2, (b, d, 4), generator=generator).float() * 2.0 - 1.0
        amount = torch.rand(b, d, 4, generator=generator)
        amount = (amount + 1.0) * negative + amount * (1 - negative)
        boxes = xyxy_to_xywh((corners + amount * sign * half).clip(0.0, 1.0))
        if abs_sizes:
            boxes = boxes.abs()
    return DenoisingQueries(labels, inverse_sigmoid(boxes), _attention_mask(d, num_queries, 2 * most), groups, most,
                            targets.counts)


def _attention_mask(d: int, q: int, group_size: int) -> Tensor:
    """True = blocked: matching queries never see denoising ones; a group sees only itself."""
    mask = torch.zeros(d + q, d + q, dtype=torch.bool)
    mask[d:, :d] = True
    for start in range(0, d, group_size):
        mask[start:start + group_size, :start] = True
        mask[start:start + group_size, start + group_size:d] = True
    return mask
