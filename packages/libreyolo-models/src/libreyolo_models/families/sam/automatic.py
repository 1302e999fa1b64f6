"""Automatic masks: everything SAM finds in a picture, from a grid of single-point prompts.

The procedure is the published one (Meta's ``SamAutomaticMaskGenerator`` with one crop layer and
no small-region clean-up; the settings and their defaults are ``contract.prompts.AutoMasks``):
each grid point is one foreground point decoded into three masks; masks whose predicted IoU or
stability score is too low are dropped; boxes of the rest are suppressed by NMS over the
predicted IoU.

Memory is bounded by the batch, not the grid: the full-size logits a stability score needs are
made a few masks at a time and dropped once their score and box are known; survivors keep their
low-resolution logits, and only the masks NMS keeps are drawn at full size again (the same
bilinear resize, so the same pixels).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...contract.prompts import (
    MASK_THRESHOLD,
    AutoMasks,
    PromptImage,
    PromptPrediction,
    logits_to_picture,
    to_input_coords,
)
from ...layers.nms_kernel import nms
from .nn import Sam

FULL_SIZE_CHUNK = 16
"""Masks upsampled to the picture at once for their stability scores (16 at 1080p: 130 MB)."""


def point_grid(points_per_side: int, orig_shape: tuple[int, int]) -> Tensor:
    """``[n * n, 2]`` (x, y) in original pixels: cell centres of an n x n grid, x fastest."""
    h, w = orig_shape
    offset = 1.0 / (2 * points_per_side)
    side = torch.linspace(offset, 1 - offset, points_per_side, dtype=torch.float64)
    ys, xs = torch.meshgrid(side, side, indexing="ij")
    return (torch.stack([xs, ys], dim=-1).reshape(-1, 2) * torch.tensor([w, h], dtype=torch.float64)).float()


def stability_scores(logits: Tensor, offset: float) -> Tensor:
    """``[N]``: per mask, the area above ``+offset`` over the area above ``-offset`` (0 if empty)."""
    inner = (logits > MASK_THRESHOLD + offset).flatten(1).sum(1)
    outer = (logits > MASK_THRESHOLD - offset).flatten(1).sum(1)
    return torch.where(outer > 0, inner / outer.clamp(min=1), torch.zeros_like(inner, dtype=torch.float32))


def mask_boxes(masks: Tensor) -> Tensor:
    """``[N, 4]`` x1, y1, x2, y2 (inclusive pixel indices, as upstream boxes them); zeros if empty."""
    n, h, w = masks.shape
    if n == 0:
        return torch.zeros((0, 4), device=masks.device)
    cols, rows = masks.any(dim=1), masks.any(dim=2)
    xi = torch.arange(w, device=masks.device)
    yi = torch.arange(h, device=masks.device)
    x1 = torch.where(cols, xi, w).amin(1)
    x2 = torch.where(cols, xi, -1).amax(1)
    y1 = torch.where(rows, yi, h).amin(1)
    y2 = torch.where(rows, yi, -1).amax(1)
    boxes = torch.stack([x1, y1, x2, y2], dim=1).float()
    return torch.where(cols.any(1, keepdim=True), boxes, torch.zeros_like(boxes))


@torch.inference_mode()
def generate_masks(net: Sam, embedding: Tensor, image: PromptImage, settings: AutoMasks) -> PromptPrediction:
    """One picture's ``[1, 256, h, w]`` embedding -> its automatic masks, best predicted IoU first."""
    device = embedding.device
    grid = point_grid(settings.points_per_side, image.orig_shape).to(device)
    kept_logits, kept_scores, kept_boxes, kept_points = [], [], [], []
    for start in range(0, len(grid), settings.points_per_batch):
        points = grid[start:start + settings.points_per_batch]
        coords = to_input_coords(points[:, None, :], image)
        labels = torch.ones(coords.shape[:2], dtype=torch.int64, device=device)
        logits, scores = net.decode(embedding, (coords, labels), None, (image.side, image.side), True)
        logits, scores = logits.float().flatten(0, 1), scores.float().flatten()  # [B * 3, h, w], [B * 3]
        sources = points.repeat_interleave(logits.shape[0] // len(points), dim=0)
        keep = scores > settings.pred_iou_thresh
        logits, scores, sources = logits[keep], scores[keep], sources[keep]
        for lo in range(0, len(logits), FULL_SIZE_CHUNK):
            chunk = logits[lo:lo + FULL_SIZE_CHUNK]
            full = logits_to_picture(chunk[:, None], image)[:, 0]
            stable = stability_scores(full, settings.stability_score_offset) > settings.stability_score_thresh
            if stable.any():
                kept_logits.append(chunk[stable])
                kept_scores.append(scores[lo:lo + FULL_SIZE_CHUNK][stable])
                kept_boxes.append(mask_boxes(full[stable] > MASK_THRESHOLD))
                kept_points.append(sources[lo:lo + FULL_SIZE_CHUNK][stable])
    h, w = image.orig_shape
    if not kept_logits:
        low = embedding.shape[-1] * 4
        return PromptPrediction(masks=torch.zeros((0, 1, h, w), dtype=torch.bool, device=device),
                                scores=torch.zeros((0, 1), device=device),
                                logits=torch.zeros((0, 1, low, low), device=device), image=image,
                                points=torch.zeros((0, 2), device=device))
    logits, scores = torch.cat(kept_logits), torch.cat(kept_scores)
    order = nms(torch.cat(kept_boxes), scores, settings.box_nms_thresh)[:settings.max_masks]
    logits = logits[order][:, None]
    return PromptPrediction(masks=logits_to_picture(logits, image) > MASK_THRESHOLD, scores=scores[order][:, None],
                            logits=logits, image=image, points=torch.cat(kept_points)[order])
