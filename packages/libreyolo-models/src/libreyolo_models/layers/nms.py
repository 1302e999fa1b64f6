"""Confidence filtering and class-aware NMS for dense detectors (eager only, never graphed)."""

from __future__ import annotations

import torch
import torchvision
from torch import Tensor

# Candidates kept (by score) before NMS: an untrained or early model scores every anchor about
# equally, and NMS over all of them would stall validation. Ranks then all finish in bounded time.
MAX_NMS_CANDIDATES = 30_000
MAX_BOX_PX = 7680  # class offset for batched NMS larger than any box coordinate


def nms_per_image(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                  classes: list[int] | None = None, agnostic: bool = False,
                  max_candidates: int = MAX_NMS_CANDIDATES) -> list[Tensor]:
    """Detections for each image of a batch.

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
    boxes = predictions[:, :4].transpose(1, 2)
    scores_all = predictions[:, 4:].transpose(1, 2)
    out = []
    for b in range(predictions.shape[0]):
        scores, cls = scores_all[b].max(1)
        keep = scores > conf
        if classes is not None:
            keep &= torch.isin(cls, torch.as_tensor(classes, device=cls.device))
        box, score, cl = boxes[b][keep], scores[keep], cls[keep]
        if score.numel() > max_candidates:
            top = score.topk(max_candidates).indices
            box, score, cl = box[top], score[top], cl[top]
        groups = torch.zeros_like(cl) if agnostic else cl
        kept = torchvision.ops.batched_nms(box.float(), score.float(), groups, iou)[:max_det]
        out.append(torch.cat((box[kept], score[kept, None], cl[kept, None].to(box.dtype)), 1).float())
    return out


def scale_to_original(det: Tensor, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> Tensor:
    """Map ``[N, 6]`` detections from letterboxed input pixels back to the original image."""
    det = det.clone()
    det[:, [0, 2]] = ((det[:, [0, 2]] - pad[0]) / ratio).clamp(0, orig_shape[1])
    det[:, [1, 3]] = ((det[:, [1, 3]] - pad[1]) / ratio).clamp(0, orig_shape[0])
    return det
