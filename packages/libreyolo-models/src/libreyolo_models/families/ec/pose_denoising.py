"""Contrastive denoising queries for EC pose (DETRPose's, from DN-DETR / DINO): noised copies of
each person's keypoints fed to the pose decoder as extra queries (training only, on the host).

Each group holds every person twice: a positive copy whose visible keypoints move by an OKS-scaled
distance (up to ``sqrt(2 ln 2)`` standard deviations of that keypoint's COCO sigma at the
person's area) and a negative copy moved further (up to ``sqrt(2 ln 10)``); invisible keypoints
and the centre (the box centre) stay put. Labels flip to a random class with probability half
``label_noise_ratio``. About ``2 * dn_number`` queries are used. An attention mask keeps groups
apart and the matching queries blind to all of them (across-instance attention).

The decoder embeds the labels itself (``label_enc``, and ``pose_enc`` for the keypoint tokens), so
this module holds only indices and positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

COCO_SIGMAS = (.26, .25, .25, .35, .35, .79, .79, .72, .72, .62, .62, 1.07, 1.07, .87, .87, .89, .89)
CENTRE_SIGMA = 0.1


def _inverse_sigmoid(x: Tensor, eps: float = 1e-5) -> Tensor:
    x = x.clip(min=0.0, max=1.0)
    return torch.log(x.clip(min=eps) / (1 - x).clip(min=eps))


@dataclass(frozen=True)
class PoseDenoising:
    """The denoising part of one pose training batch.

    Attributes:
        labels: ``int64 [B, D]`` noised classes (0 on padding slots).
        valid: ``bool [B, D]``: slots holding a person (padding slots get zero content).
        points_unact: ``[B, D, 1 + K, 2]`` noised centre and keypoints, logit space (0 on padding).
        attn_mask: ``bool [D + Q, D + Q]`` for across-instance attention, True where blocked.
        groups, max_persons, counts: the layout (group g's positives occupy slots
            ``[2 g m, 2 g m + n_b)`` of image b, with m = ``max_persons``).
    """

    labels: Tensor
    valid: Tensor
    points_unact: Tensor
    attn_mask: Tensor | None
    groups: int
    max_persons: int
    counts: tuple[int, ...]

    @property
    def num_queries(self) -> int:
        return 2 * self.max_persons * self.groups

    def positive_slots(self, image: int) -> Tensor:
        """``int64 [groups * n]``: image ``image``'s positive copies, group-major (slot k answers
        person ``k % n``)."""
        n = self.counts[image]
        return (torch.arange(self.groups)[:, None] * 2 * self.max_persons + torch.arange(n)[None]).flatten()


def build_pose_denoising(labels: Tensor, boxes_xyxy: Tensor, keypoints: Tensor, areas: Tensor,
                         counts: Sequence[int], image_hw: tuple[int, int], num_queries: int, *,
                         dn_number: int = 20, label_noise_ratio: float = 0.5, label_classes: int = 80,
                         sigmas: Sequence[float] = COCO_SIGMAS,
                         generator: torch.Generator | None = None) -> PoseDenoising:
    """Denoising queries for a batch (CPU tensors; see the module docstring).

    Args:
        labels: ``int64 [M]`` person classes; boxes_xyxy: ``[M, 4]`` normalised (the centre
            token's position is the box centre); keypoints: ``[M, K, 3]`` x, y normalised and
            visibility (0 = not labelled); areas: ``[M]`` normalised box areas; all sorted by image
            with ``counts`` persons per image.
        image_hw: the input's ``(H, W)`` in pixels (OKS distances are in pixels).
        num_queries: the matching queries that follow.
        label_classes: the random labels' range (DETRPose draws from 80 COCO classes).
    """
    b, m = len(counts), max(counts, default=0)
    k = keypoints.shape[1]
    if m == 0:
        return PoseDenoising(torch.zeros(b, 0, dtype=torch.int64), torch.zeros(b, 0, dtype=torch.bool),
                             torch.zeros(b, 0, k + 1, 2), None, 0, 0, tuple(counts))
    groups = max((2 * dn_number) // (2 * m), 1)
    total, copies = labels.shape[0], 2 * groups
    noisy = labels.repeat(copies)
    if label_noise_ratio > 0:
        flip = torch.rand(noisy.shape, generator=generator) < label_noise_ratio * 0.5
        noisy = torch.where(flip, torch.randint(0, label_classes, noisy.shape, generator=generator), noisy)
    centres = (boxes_xyxy[:, :2] + boxes_xyxy[:, 2:]) / 2
    points = torch.cat((centres[:, None], keypoints[..., :2]), 1).repeat(copies, 1, 1)       # [C*M, 1+K, 2]
    still = torch.cat((torch.ones(total, 1, dtype=torch.bool), keypoints[..., 2] == 0), 1).repeat(copies, 1)
    variances = (2 * torch.tensor((CENTRE_SIGMA, *[s / 10 for s in sigmas]), dtype=torch.float32)) ** 2
    pixel_areas = areas.repeat(copies)[:, None, None] * image_hw[0] * image_hw[1]
    direction = F.normalize(torch.rand(points.shape, generator=generator), dim=-1)
    negative = (torch.arange(copies) % 2 == 1).repeat_interleave(total)[:, None, None]
    u = torch.rand(points.shape[:2] + (1,), generator=generator)
    low, high = torch.where(negative, 0.6931471805599453, 0.0), torch.where(negative, 2.302585092994046,
                                                                            0.6931471805599453)
    alpha = low + u * (high - low)
    eps = float(torch.finfo(torch.float32).eps)
    distance = torch.sqrt(alpha * 2 * (pixel_areas + eps) * variances[None, :, None]) / max(image_hw)
    distance = distance.masked_fill(still[..., None], 0.0)
    noised = _inverse_sigmoid(points + distance * direction)
    image = torch.repeat_interleave(torch.arange(b), torch.tensor(list(counts))).repeat(copies)
    within = torch.cat([torch.arange(n) for n in counts]).repeat(copies)
    slot = within + m * torch.arange(copies).repeat_interleave(total)
    d = m * copies
    out_labels = torch.zeros(b, d, dtype=torch.int64).index_put((image, slot), noisy)
    valid = torch.zeros(b, d, dtype=torch.bool).index_put((image, slot), torch.ones_like(slot, dtype=torch.bool))
    out_points = torch.zeros(b, d, k + 1, 2).index_put((image, slot), noised)
    mask = torch.zeros(d + num_queries, d + num_queries, dtype=torch.bool)
    mask[d:, :d] = True
    for start in range(0, d, 2 * m):
        mask[start:start + 2 * m, :start] = True
        mask[start:start + 2 * m, start + 2 * m:d] = True
    return PoseDenoising(out_labels, valid, out_points, mask, groups, m, tuple(counts))
