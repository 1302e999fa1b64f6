"""Point-sampled mask losses and matching costs of query-based instance segmenters (RF-DETR's, which
EC's segment loss reuses): eager only, never graphed.

A mask is scored at a few points rather than at every pixel (PointRend's idea, as Mask2Former
trains): the matching cost reads ``h * w / ratio`` points drawn uniformly, shared by every query
and ground truth of a step; the loss on matched pairs reads as many points, three quarters of them
the most uncertain of three times as many random candidates (logits nearest 0) and the rest
random. Coordinates are normalised to [0, 1], so predictions at ``H / 4`` and ground truth at
any resolution compare without resizing. Predictions are sampled bilinearly, ground truth by
nearest neighbour.

Terms: binary cross-entropy averaged over a mask's points, and Dice ``1 - (2 |p t| + 1) /
(|p| + |t| + 1)``; each summed over masks and divided by the caller's normaliser.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

POINT_RATIO = 16
"""``h * w / POINT_RATIO`` points per mask (upstream's ``mask_point_sample_ratio``)."""
OVERSAMPLE = 3
IMPORTANCE = 0.75


def point_sample(maps: Tensor, points: Tensor, mode: str = "bilinear") -> Tensor:
    """``maps [N, C, H, W]`` at ``points [N, P, 2]`` (x, y in [0, 1]) -> ``[N, C, P]``."""
    grid = (2.0 * points - 1.0)[:, :, None].to(maps.dtype)
    return F.grid_sample(maps, grid, mode=mode, align_corners=False)[..., 0]


def uncertain_points(logits: Tensor, count: int, generator: torch.Generator | None = None) -> Tensor:
    """``[N, count, 2]`` points for masks ``logits [N, 1, H, W]``: ``IMPORTANCE`` of them the most
    uncertain (smallest ``|logit|``) of ``OVERSAMPLE * count`` random candidates, the rest random."""
    n = logits.shape[0]
    candidates = torch.rand(n, OVERSAMPLE * count, 2, device=logits.device, generator=generator)
    uncertainty = -point_sample(logits.detach(), candidates)[:, 0].abs()
    important = int(IMPORTANCE * count)
    top = uncertainty.topk(important, dim=1).indices
    chosen = candidates.gather(1, top[..., None].expand(-1, -1, 2))
    rest = torch.rand(n, count - important, 2, device=logits.device, generator=generator)
    return torch.cat((chosen, rest), 1)


def mask_point_count(height: int, width: int, ratio: int = POINT_RATIO) -> int:
    """Points per mask for the loss: ``max(h, h * w / ratio)`` (upstream's rule)."""
    return max(height, height * width // ratio)


def mask_loss_terms(logits: Tensor, targets: Tensor, ratio: int = POINT_RATIO,
                    generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Unnormalised ``(cross-entropy, dice)`` sums over matched masks.

    Args:
        logits: ``[K, h, w]`` predicted mask logits of the matched queries (K may be 0).
        targets: ``[K, Ht, Wt]`` their ground-truth masks (0 / 1), any resolution.
    """
    if logits.shape[0] == 0:
        zero = logits.sum() * 0.0
        return zero, zero
    count = mask_point_count(logits.shape[-2], logits.shape[-1], ratio)
    with torch.no_grad():
        points = uncertain_points(logits[:, None].float(), count, generator)
        labels = point_sample(targets[:, None].to(logits.dtype), points, mode="nearest")[:, 0]
    sampled = point_sample(logits[:, None], points)[:, 0].float()
    ce = F.binary_cross_entropy_with_logits(sampled, labels.float(), reduction="none").mean(1).sum()
    prob = sampled.sigmoid()
    dice = (1 - (2 * (prob * labels).sum(1) + 1) / (prob.sum(1) + labels.sum(1) + 1)).sum()
    return ce, dice


def mask_costs(pixels: Tensor, queries: Tensor, bias: Tensor, gt_masks: Tensor, gt_image: Tensor,
               ratio: int = POINT_RATIO, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Matching costs of every query against every ground-truth mask of its own image.

    Args:
        pixels: ``[B, C, h, w]`` pixel features; queries: ``[B, Q, C]``; bias: the mask bias
            (a logit is ``<pixel, query> + bias``).
        gt_masks: ``[G, Ht, Wt]`` the batch's ground-truth masks, padded per image: ``gt_image``
            ``int64 [B, g]`` gives, per image, its rows of ``gt_masks`` (padding: any row).

    Returns:
        ``(cross-entropy, dice)`` costs, each ``float32 [B, Q, g]``.
    """
    b, _, h, w = pixels.shape
    count = max(1, h * w // ratio)
    points = torch.rand(1, count, 2, device=pixels.device, generator=generator)
    feats = point_sample(pixels.float(), points.expand(b, -1, -1))                   # [B, C, P]
    logits = torch.einsum("bcp,bqc->bqp", feats, queries.float()) + bias.float().reshape(-1)[0]
    labels = point_sample(gt_masks[:, None].float(), points.expand(gt_masks.shape[0], -1, -1),
                          mode="nearest")[:, 0]                                     # [G, P]
    labels = labels[gt_image]                                                        # [B, g, P]
    positive = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits), reduction="none")
    negative = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits), reduction="none")
    ce = (torch.einsum("bqp,bgp->bqg", positive, labels)
          + torch.einsum("bqp,bgp->bqg", negative, 1 - labels)) / count
    prob = logits.sigmoid()
    dice = 1 - (2 * torch.einsum("bqp,bgp->bqg", prob, labels) + 1) / (
        prob.sum(-1)[:, :, None] + labels.sum(-1)[:, None, :] + 1)
    return ce, dice


def matched_mask_logits(pixels: Tensor, queries: Tensor, bias: Tensor, image: Tensor, query: Tensor) -> Tensor:
    """Dense logits ``[K, h, w]`` of the matched ``(image, query)`` pairs only (dense logits of
    every query would not fit): ``<pixels[image], queries[image, query]> + bias``, one image's
    pairs at a time (gathering a pixel map per pair would copy it K times).

    ``image`` must be sorted (the loss's pair index is): each image's pairs are one run."""
    if image.numel() == 0:
        return pixels.new_zeros((0, *pixels.shape[-2:])) + 0.0 * pixels.sum() + 0.0 * queries.sum()
    parts = []
    for b in torch.unique_consecutive(image).tolist():
        rows = (image == b).nonzero()[:, 0]
        parts.append(torch.einsum("chw,kc->khw", pixels[b], queries[b, query[rows]]))
    return torch.cat(parts) + bias.reshape(-1)[0]
