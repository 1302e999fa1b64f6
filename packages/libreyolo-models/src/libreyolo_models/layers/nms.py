"""Confidence filtering and class-aware NMS for dense detectors (eager only, never graphed)."""

from __future__ import annotations

import torch
import torchvision
from torch import Tensor

# Candidates kept (by score) before NMS: an untrained or early model scores every anchor about
# equally, and NMS over all of them would stall validation. Ranks then all finish in bounded time.
MAX_NMS_CANDIDATES = 30_000


def nms_per_image(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                  classes: list[int] | None = None, agnostic: bool = False,
                  max_candidates: int = MAX_NMS_CANDIDATES) -> list[Tensor]:
    """Detections for each image of a batch.

    The whole batch goes through one NMS call, and the host waits on the device twice per
    batch (the candidate count, the per-image counts), not a few times per image: the score
    threshold and the top-``max_candidates`` cut run on fixed shapes, the candidates of all
    images are taken out at once, and each image's boxes form their own NMS groups, moved apart
    by an offset wider than any box. The shift is done in float64, which keeps the shifted
    coordinates far below float32's rounding, so an image gets the detections it gets alone.

    Args:
        predictions: ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then per-class scores in [0, 1].
        conf: keep candidates whose best class score is above this.
        iou: NMS IoU threshold; boxes of different classes never suppress each other, unless
            ``agnostic``.
        max_det: detections kept per image, best first.
        classes: keep only these class ids (applied before NMS).
        max_candidates: top-scoring candidates considered per image before NMS.

    Returns:
        Per image, ``float [N, 6]``: x1, y1, x2, y2, score, class id; sorted by score.
    """
    batch, nc, anchors = predictions.shape[0], predictions.shape[1] - 4, predictions.shape[2]
    boxes = predictions[:, :4].transpose(1, 2)                   # [B, A, 4]
    scores, cls = predictions[:, 4:].max(1)                      # [B, A]
    keep = scores > conf
    if classes is not None:
        keep &= torch.isin(cls, torch.as_tensor(classes, device=cls.device))
    ranked = scores.masked_fill(~keep, float("-inf"))
    top_scores, top = ranked.topk(min(max_candidates, anchors), dim=1)  # fixed shape, best first
    flat = (top_scores > float("-inf")).flatten().nonzero().squeeze(1)  # the one data-dependent selection
    if flat.numel() == 0:
        return [predictions.new_zeros((0, 6), dtype=torch.float32) for _ in range(batch)]
    box = boxes.gather(1, top[..., None].expand(-1, -1, 4)).reshape(-1, 4)[flat]
    score = top_scores.reshape(-1)[flat]
    cl = cls.gather(1, top).reshape(-1)[flat]
    image = torch.div(flat, top.shape[1], rounding_mode="floor")
    groups = image * (1 if agnostic else nc) + (0 if agnostic else cl)
    span = box.double().abs().max() * 2 + 1                      # wider than any box: groups never touch
    shifted = box.double() + (groups.double() * span)[:, None]
    kept = torchvision.ops.nms(shifted, score.double(), iou)     # best first over the batch
    kept = kept[torch.sort(image[kept], stable=True).indices]   # by image, best first within each
    counts = torch.bincount(image[kept], minlength=batch).tolist()
    det = torch.cat((box[kept], score[kept, None], cl[kept, None].to(box.dtype)), 1).float()
    return [d[:max_det] for d in det.split(counts)]


def scale_to_original(det: Tensor, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> Tensor:
    """Map ``[N, 6]`` detections from letterboxed input pixels back to the original image."""
    det = det.clone()
    det[:, [0, 2]] = ((det[:, [0, 2]] - pad[0]) / ratio).clamp(0, orig_shape[1])
    det[:, [1, 3]] = ((det[:, [1, 3]] - pad[1]) / ratio).clamp(0, orig_shape[0])
    return det
