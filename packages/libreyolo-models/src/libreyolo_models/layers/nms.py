"""Confidence filtering and class-aware NMS for dense detectors (eager only, never graphed)."""

from __future__ import annotations

import torch
from torch import Tensor

# Candidates kept (by score) before NMS: an untrained or early model scores every anchor about
# equally, and NMS over all of them would stall validation. Ranks then all finish in bounded time.
MAX_NMS_CANDIDATES = 30_000


def nms_per_image(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                  classes: list[int] | None = None, agnostic: bool = False,
                  max_candidates: int = MAX_NMS_CANDIDATES) -> list[Tensor]:
    """Detections for each image of a batch.

    The score threshold and the top-``max_candidates`` cut run on fixed shapes for the whole
    batch and the candidates of all images are taken out at once; NMS then runs per image (a
    class-aware ``batched_nms`` over that image's candidates). One NMS over the whole batch would
    cost ``(B * n)^2`` instead of ``B * n^2``: at batch 32 with every anchor a candidate (an
    untrained model) that is a 9 GB suppression mask and 30x the time. The host waits on the
    device once for the per-image candidate counts, then once per image for its kept count.

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
    anchors = predictions.shape[2]
    boxes = predictions[:, :4].transpose(1, 2)                   # [B, A, 4]
    scores, cls = predictions[:, 4:].max(1)                      # [B, A]
    keep = scores > conf
    if classes is not None:
        keep &= torch.isin(cls, torch.as_tensor(classes, device=cls.device))
    ranked = scores.masked_fill(~keep, float("-inf"))
    top_scores, top = ranked.topk(min(max_candidates, anchors), dim=1)  # fixed shape, best first
    valid = top_scores > float("-inf")
    flat = valid.flatten().nonzero().squeeze(1)                  # image-major: image 0's first
    box = boxes.gather(1, top[..., None].expand(-1, -1, 4)).reshape(-1, 4)[flat].float()
    score = top_scores.reshape(-1)[flat].float()
    cl = cls.gather(1, top).reshape(-1)[flat]
    counts = valid.sum(1).tolist()
    from torchvision.ops import batched_nms  # imported on use: torchvision costs seconds at import

    out: list[Tensor] = []
    for b, s, c in zip(box.split(counts), score.split(counts), cl.split(counts)):
        if s.numel() == 0:
            out.append(predictions.new_zeros((0, 6), dtype=torch.float32))
            continue
        # float64 for the class offsets batched_nms adds: float32 would round shifted coordinates
        # (80 classes x 640 px) by ~0.004 px and could flip a borderline suppression.
        kept = batched_nms(b.double(), s.double(), torch.zeros_like(c) if agnostic else c, iou)
        kept = kept[:max_det]
        out.append(torch.cat((b[kept], s[kept, None], c[kept, None].to(b.dtype)), 1))
    return out


def scale_to_original(det: Tensor, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> Tensor:
    """Map ``[N, 6]`` detections from letterboxed input pixels back to the original image."""
    det = det.clone()
    det[:, [0, 2]] = ((det[:, [0, 2]] - pad[0]) / ratio).clamp(0, orig_shape[1])
    det[:, [1, 3]] = ((det[:, [1, 3]] - pad[1]) / ratio).clamp(0, orig_shape[0])
    return det
